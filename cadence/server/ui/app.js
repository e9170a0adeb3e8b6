// The cadence playground: speak text with the loaded checkpoint and hear it as it streams.
//
// Everything goes through the server's public API (/v1/models, /v1/audio/voices, /v1/audio/speech),
// exactly as any client would. Audio is requested as raw 24 kHz s16le PCM and scheduled on a Web
// Audio clock as each piece arrives, so playback starts with the first chunk. An API key, when the
// server wants one, lives in this tab's sessionStorage only.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("cadence-api-key") || "", card: null, sampleRate: 24000, run: null };

function headers(extra = {}) {
  return state.key ? { ...extra, Authorization: `Bearer ${state.key}` } : extra;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (response.status === 401) {
    showKeyPanel();
    throw new Error("this server needs an API key");
  }
  return response;
}

async function errorText(response) {
  try {
    const e = (await response.json()).error;
    return `${e.message}${e.param ? ` (field: ${e.param})` : ""} [${response.status} ${e.code || e.type}]`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function showKeyPanel() {
  $("key-panel").hidden = false;
  $("app").hidden = true;
  $("model").textContent = "an API key is needed";
}

// -- start-up: what the checkpoint does, its voices ---------------------------------------------

async function connect() {
  showError("");
  let card;
  try {
    const models = await api("/v1/models");
    if (!models.ok) throw new Error(await errorText(models));
    card = (await models.json()).data[0];
  } catch (e) {
    if (!$("key-panel").hidden) return;
    $("model").textContent = `cannot reach the server: ${e.message}`;
    return;
  }
  state.card = card;
  state.sampleRate = card.sample_rate || 24000;
  $("key-panel").hidden = true;
  $("app").hidden = false;
  const size = String(card.model_size).replace(/^(\d+)b(\d+)$/, "$1.$2B");  // "1b7" -> "1.7B"
  $("model").textContent = `${card.id} · ${card.tts_model_type} · ${size}`;
  fillLanguages(card.languages || ["auto"]);
  const takesInstructions = Boolean(card.instructions);
  $("instructions-label").hidden = !takesInstructions;
  $("instructions").placeholder = card.instructions === "voice description"
    ? "A deep, calm male voice." : "Speak slowly, in a whisper.";
  $("clone-panel").hidden = !card.voice_cloning;
  await loadVoices();
  const version = await api("/version").then((r) => r.json()).catch(() => ({}));
  if (version.random_weights) {
    $("model").textContent += " · random weights (noise)";
    if (!$("max-new-tokens").value) $("max-new-tokens").value = 50;  // random weights seldom stop
  }
}

function fillLanguages(languages) {
  const select = $("language");
  select.replaceChildren(...languages.map((l) => new Option(l, l)));
}

async function loadVoices() {
  const select = $("voice");
  const kind = state.card.tts_model_type;
  if (kind === "voice_design") {
    select.replaceChildren(new Option("described by the instructions", ""));
    select.disabled = true;
    return;
  }
  const voices = [];
  let after = null;
  do {  // every page of the listing
    const query = new URLSearchParams({ limit: "1000", ...(after ? { after } : {}) });
    const r = await api(`/v1/audio/voices?${query}`);
    if (!r.ok) throw new Error(await errorText(r));
    const page = await r.json();
    voices.push(...page.voices);
    after = page.has_more ? page.last_id : null;
  } while (after);
  const options = voices.map((v) => new Option(v.description ? `${v.name} (${v.description})` : v.name, v.id));
  if (kind === "base" && !options.length) options.push(new Option("add a voice below first", ""));
  select.replaceChildren(...options);
  select.disabled = false;
  const ryan = voices.find((v) => v.id === "ryan");
  if (ryan) select.value = "ryan";
}

// -- speaking -------------------------------------------------------------------------------------

function speechBody() {
  const body = { input: $("text").value, response_format: "pcm", language: $("language").value };
  const number = (id) => ($(id).value === "" ? undefined : Number($(id).value));
  if ($("voice").value) body.voice = $("voice").value;
  if (!$("instructions-label").hidden && $("instructions").value) body.instructions = $("instructions").value;
  for (const [field, id] of [["speed", "speed"], ["seed", "seed"], ["max_new_tokens", "max-new-tokens"]]) {
    if (number(id) !== undefined) body[field] = number(id);
  }
  return body;
}

class Player {
  // Schedules PCM pieces back to back on an AudioContext clock, keeping a copy for the download.
  constructor(sampleRate) {
    this.context = new AudioContext({ sampleRate });
    this.sampleRate = sampleRate;
    this.next = 0;
    this.pieces = [];
    this.samples = 0;
    this.carry = null;  // an odd byte left from the last network chunk
  }

  push(bytes) {
    if (this.carry) {
      const joined = new Uint8Array(this.carry.length + bytes.length);
      joined.set(this.carry);
      joined.set(bytes, this.carry.length);
      bytes = joined;
      this.carry = null;
    }
    if (bytes.length % 2) {
      this.carry = bytes.slice(-1);
      bytes = bytes.slice(0, -1);
    }
    if (!bytes.length) return;
    const pcm = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    this.pieces.push(pcm);
    this.samples += pcm.length;
    const buffer = this.context.createBuffer(1, pcm.length, this.sampleRate);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) channel[i] = pcm[i] / 32768;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    this.next = Math.max(this.next, this.context.currentTime + 0.02);
    source.start(this.next);
    this.next += buffer.duration;
  }

  get seconds() {
    return this.samples / this.sampleRate;
  }

  wav() {
    const data = this.samples * 2;
    const view = new DataView(new ArrayBuffer(44));
    const ascii = (offset, text) => [...text].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
    ascii(0, "RIFF"); view.setUint32(4, 36 + data, true); ascii(8, "WAVE"); ascii(12, "fmt ");
    view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
    view.setUint32(24, this.sampleRate, true); view.setUint32(28, this.sampleRate * 2, true);
    view.setUint16(32, 2, true); view.setUint16(34, 16, true); ascii(36, "data"); view.setUint32(40, data, true);
    return new Blob([view.buffer, ...this.pieces.map((p) => p.buffer)], { type: "audio/wav" });
  }
}

function setStat(id, text) {
  $(id).textContent = text;
}

async function speak(event) {
  event.preventDefault();
  showError("");
  stop();
  const player = new Player(state.sampleRate);
  const controller = new AbortController();
  const run = { controller, player, start: performance.now(), bytes: 0, firstAudio: null };
  state.run = run;
  $("speak").disabled = true;
  $("stop").disabled = false;
  $("download").hidden = true;
  setStat("stat-status", "waiting");
  for (const [id, text] of [["stat-ttfa", "–"], ["stat-bytes", "0"], ["stat-audio", "0.00 s"], ["stat-rtf", "–"]]) {
    setStat(id, text);
  }
  try {
    const response = await api("/v1/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(speechBody()),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    setStat("stat-status", "streaming");
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      run.bytes += value.length;
      if (run.firstAudio === null && value.length) {
        run.firstAudio = performance.now() - run.start;
        setStat("stat-ttfa", `${run.firstAudio.toFixed(0)} ms`);
      }
      player.push(value);
      const wall = (performance.now() - run.start) / 1000;
      setStat("stat-bytes", run.bytes.toLocaleString("en"));
      setStat("stat-audio", `${player.seconds.toFixed(2)} s`);
      if (player.seconds > 0) setStat("stat-rtf", (wall / player.seconds).toFixed(3));
    }
    setStat("stat-status", "done");
    const link = $("download");
    link.href = URL.createObjectURL(player.wav());
    link.hidden = false;
  } catch (e) {
    setStat("stat-status", controller.signal.aborted ? "stopped" : "failed");
    if (!controller.signal.aborted) showError(e.message);
  } finally {
    $("speak").disabled = false;
    $("stop").disabled = true;
  }
}

function stop() {
  if (state.run) state.run.controller.abort();
}

// -- voice cloning (Base) -------------------------------------------------------------------------

let recorded = null;

async function record() {
  const button = $("record");
  if (button.recorder) {
    button.recorder.stop();
    return;
  }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const recorder = new MediaRecorder(stream);
    const parts = [];
    recorder.ondataavailable = (e) => parts.push(e.data);
    recorder.onstop = () => {
      stream.getTracks().forEach((t) => t.stop());
      recorded = new Blob(parts, { type: recorder.mimeType });
      button.recorder = null;
      button.textContent = "Record again";
      $("clone-status").textContent = `recorded ${(recorded.size / 1024).toFixed(0)} KB`;
    };
    recorder.start();
    button.recorder = recorder;
    button.textContent = "Stop recording";
  } catch (e) {
    showError(`cannot record: ${e.message}`);
  }
}

async function saveVoice(event) {
  event.preventDefault();
  showError("");
  const file = $("clone-file").files[0] || recorded;
  if (!file) {
    showError("choose a recording or record one first");
    return;
  }
  const form = new FormData();
  form.append("audio_sample", file, file.name || "recording.webm");
  form.append("name", $("clone-name").value);
  form.append("consent", $("clone-consent").checked ? "true" : "");
  if ($("clone-text").value) form.append("ref_text", $("clone-text").value);
  $("clone-status").textContent = "analysing…";
  try {
    const r = await api("/v1/audio/voices", { method: "POST", body: form });
    if (!r.ok) throw new Error(await errorText(r));
    const voice = await r.json();
    await loadVoices();
    $("voice").value = voice.id;  // the listing holds the new voice before the page says it is saved
    $("clone-status").textContent = `saved ${voice.name} (${voice.seconds} s)`;
  } catch (e) {
    $("clone-status").textContent = "";
    showError(e.message);
  }
}

// -- wiring ---------------------------------------------------------------------------------------

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.key = $("api-key").value.trim();
  sessionStorage.setItem("cadence-api-key", state.key);
  connect();
});
$("speak-form").addEventListener("submit", speak);
$("stop").addEventListener("click", stop);
$("record").addEventListener("click", record);
$("clone-form").addEventListener("submit", saveVoice);
connect();
