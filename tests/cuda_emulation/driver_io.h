// Reading a driver's ARGS_FILE (slab_driver.cpp, sampler_driver.cpp): buffers as (u64 byte count,
// bytes), each kept with 16 bytes of slack past its end (an absent one is those 16 zero bytes), and
// 8-byte scalars.
#pragma once
#include <fstream>
#include <vector>

inline std::vector<unsigned char> read_buffer(std::ifstream& in) {
  unsigned long long n;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::vector<unsigned char> b(n + 16);
  in.read(reinterpret_cast<char*>(b.data()), n);
  return b;
}
template <class T>
T read_scalar(std::ifstream& in) {
  static_assert(sizeof(T) == 8, "the drivers' scalars are 8 bytes");
  T v;
  in.read(reinterpret_cast<char*>(&v), 8);
  return v;
}
