"""The built-in multilingual sample set: 40 short-to-medium sentences, four in each of ten languages.

Written for this benchmark (not taken from any dataset). Everyday, TTS-friendly prose with numbers kept
as words, so every server reads them the same way. Ordered round-robin by language so that any prefix of
the set (a short run) is still multilingual.
"""

from __future__ import annotations

# (language code, text); codes are ISO 639-1, mapped to the model's language names in workload.py.
_BY_LANGUAGE: dict[str, list[str]] = {
    "en": [
        "The kettle clicked off just as the rain started tapping on the kitchen window.",
        "Please leave the parcel with the neighbour at number twelve if nobody answers the door.",
        "We missed the last ferry, so we spent the evening watching the harbour lights come on one by one.",
        "Turn left after the bakery, and the library will be on your right.",
    ],
    "zh": [
        "今天早上的地铁特别挤，我差点没赶上第一节课。",
        "请把窗户关小一点，外面的风越来越大了。",
        "周末我们打算去山里露营，顺便看看秋天的红叶。",
        "这家小面馆开了二十多年，味道一直没有变。",
    ],
    "ja": [
        "駅前の喫茶店で、友達と三時に待ち合わせをしています。",
        "雨が止んだら、公園まで少し散歩しませんか。",
        "この町の図書館は、夜の九時まで開いているそうです。",
        "昨日買ったパンは、思っていたよりずっと柔らかかった。",
    ],
    "ko": [
        "오늘 저녁에는 집에서 조용히 책을 읽고 싶어요.",
        "버스가 늦게 와서 회의에 조금 늦을 것 같습니다.",
        "주말마다 시장에 가서 신선한 과일을 사 와요.",
        "창문을 열어 두었더니 방 안에 꽃 냄새가 가득해졌어요.",
    ],
    "de": [
        "Der Zug nach Hamburg fährt heute ausnahmsweise von Gleis sieben ab.",
        "Kannst du bitte noch Milch und frisches Brot vom Markt mitbringen?",
        "Im Herbst färben sich die Blätter im Park fast über Nacht golden.",
        "Wir haben den ganzen Nachmittag an einem kniffligen Puzzle gesessen.",
    ],
    "fr": [
        "Le marché du samedi matin sent toujours le pain chaud et les fraises.",
        "Pourrais-tu arroser les plantes pendant que je suis en voyage ?",
        "Nous avons traversé le pont à vélo juste avant le coucher du soleil.",
        "La réunion est reportée à jeudi, à cause d'un problème de salle.",
    ],
    "es": [
        "El autobús de las ocho siempre llega con unos minutos de retraso.",
        "Mi abuela guarda las recetas familiares en una libreta muy vieja.",
        "Si mañana hace buen tiempo, iremos a la playa con los niños.",
        "Cerramos la tienda un poco antes porque se fue la luz en todo el barrio.",
    ],
    "it": [
        "Ogni mattina prendo un caffè al bar sotto casa prima di andare al lavoro.",
        "Il treno per Firenze è in ritardo di circa venti minuti.",
        "Abbiamo trovato una piccola trattoria nascosta in fondo al vicolo.",
        "Domani pomeriggio porto il cane dal veterinario per il vaccino.",
    ],
    "pt": [
        "A padaria da esquina abre às seis e o pão sai sempre quentinho.",
        "Esqueci o guarda-chuva no escritório e cheguei em casa encharcado.",
        "No verão passado aprendemos a velejar num lago perto da serra.",
        "Você pode me lembrar de ligar para o dentista amanhã cedo?",
    ],
    "ru": [
        "Вечером мы сидели на балконе и слушали, как шумит дождь.",
        "Не забудь купить хлеб и пару яблок по дороге домой.",
        "Этот маленький музей открывается только по выходным.",
        "Утром на реке был такой туман, что не было видно другого берега.",
    ],
}

LANGUAGES: tuple[str, ...] = tuple(_BY_LANGUAGE)

# Round-robin: en, zh, ja, ..., ru, then the second sentence of each, and so on.
SAMPLES: tuple[tuple[str, str], ...] = tuple(
    (lang, _BY_LANGUAGE[lang][i]) for i in range(len(next(iter(_BY_LANGUAGE.values())))) for lang in LANGUAGES
)
