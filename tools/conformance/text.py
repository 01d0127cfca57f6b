"""Text the project writes itself: template sentences and a made-up target language (its
words are hashes of the English ones), for the SentencePiece models and the sources."""
import hashlib
import re


WORDS = dict(
    det=["a", "the", "one", "every", "this", "that", "my", "our", "her", "his"],
    adj=["small", "old", "young", "tall", "quiet", "happy", "red", "blue", "green", "yellow",
         "heavy", "bright", "tired", "busy", "wooden", "famous", "strange", "warm", "cold",
         "careful", "naïve", "little", "dark", "friendly"],
    noun=["man", "woman", "child", "dog", "cat", "teacher", "doctor", "baker", "farmer", "boy",
          "girl", "bird", "horse", "musician", "driver", "student", "neighbour", "fisherman",
          "painter", "cook", "waiter", "nurse", "climber", "tourist"],
    verb=["read", "carry", "paint", "find", "watch", "clean", "sell", "buy", "open", "close",
          "repair", "draw", "throw", "catch", "hold", "push", "follow", "build", "lose", "show"],
    obj=["a book", "the door", "a ball", "an umbrella", "the window", "a letter", "a basket",
         "the bicycle", "a map", "a cup of tea", "the newspaper", "a guitar", "a ladder",
         "the keys", "a crêpe", "a ticket", "the boat", "a photograph", "a kite", "the menu"],
    prep=["in", "near", "behind", "under", "beside", "in front of", "across", "along", "inside",
          "next to", "at"],
    place=["the park", "the station", "the market", "the river", "the garden", "a café",
           "the museum", "the beach", "the bridge", "the school", "the harbour", "the hotel",
           "the kitchen", "the library", "the square", "the forest", "a village", "the hill"],
    time=["today", "yesterday", "in the morning", "at night", "every Sunday", "after lunch",
          "before dinner", "in winter", "last summer", "at 7:30", "on Monday", "in 1998"],
    name=["Anna", "José", "Zoë", "Chloé", "Björn", "Müller", "Renée", "Tom", "Maria", "Noël"],
)


def english_corpus(rng, n):
    """n template sentences (statements, questions, quotes, numbers), deterministic in rng."""
    def pick(k):
        return rng.choice(WORDS[k])

    def verbs():  # third person singular
        v = pick("verb")
        return v[:-1] + "ies" if v.endswith("ry") else v + ("es" if v[-2:] in ("ch", "sh") else "s")

    lines = []
    for i in range(n):
        kind = i % 6
        subj = f"{pick('det')} {pick('adj')} {pick('noun')}"
        if kind == 0:
            s = f"{subj} {verbs()} {pick('obj')} {pick('prep')} {pick('place')} {pick('time')}."
        elif kind == 1:
            s = f"Why does {subj} {pick('verb')} {pick('obj')} {pick('prep')} {pick('place')}?"
        elif kind == 2:
            s = f"\"{pick('obj').capitalize()} is {pick('prep')} {pick('place')},\" said {pick('name')}."
        elif kind == 3:
            n1, n2 = rng.randint(2, 99), rng.randint(100, 5000)
            s = f"{pick('name')} paid {n1}.{rng.randint(10, 99)} € for {n2 % 7 + 2} tickets to {pick('place')}."
        elif kind == 4:
            s = (f"{subj} and {pick('det')} {pick('noun')} {pick('verb')} {pick('obj')}, "
                 f"while {pick('name')} {verbs()} {pick('obj')} {pick('time')}.")
        else:
            s = f"{pick('name')}'s {pick('noun')} {verbs()} {pick('obj')} - {pick('time')}!"
        lines.append(s[0].upper() + s[1:])
    return lines


SYLLABLES = ["ka", "lo", "mi", "ne", "sä", "tö", "ru", "bé", "gü", "ßa", "en", "ar", "ol",
             "ich", "ung", "sch", "ver", "de", "zu", "fa", "wi", "po", "lä", "nü", "tr", "sk",
             "an", "ei", "au", "ho"]
WORD_RE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_", re.UNICODE)


def target_word(word):
    """A made-up target-language word: a hash of the lower-cased word picks 1-3 syllables."""
    h = hashlib.sha256(word.lower().encode("utf-8")).digest()
    out = "".join(SYLLABLES[b % len(SYLLABLES)] for b in h[1:2 + h[0] % 3])
    return out.capitalize() if word[:1].isupper() else out


def to_target(line):
    """Maps each word of an English line to target_word, keeping numbers and punctuation."""
    pieces = []
    pos = 0
    for m in WORD_RE.finditer(line):
        pieces.append(line[pos:m.start()])
        tok = m.group(0)
        pieces.append(target_word(tok) if tok[0].isalpha() else tok)
        pos = m.end()
    pieces.append(line[pos:])
    return "".join(pieces)


def non_latin(line):
    return re.search("[\u0370-\u03ff\u0400-\u04ff]", line) is not None
