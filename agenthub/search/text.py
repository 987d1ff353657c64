"""Search terms of mixed Chinese/English text: CJK bigrams and characters (or jieba words), stemmed English, whole
identifiers."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from typing import Literal

import Stemmer

CjkMode = Literal["grams", "words", "bigrams"]
CJK_MODE: CjkMode = "grams"
"""How Chinese is cut. `grams` (the default): overlapping CJK bigrams and then every single character of the run
(房租 and 租房 still share 租; a name out of any dictionary is its bigram). `words`: jieba's words (dictionary only,
plus bigrams inside long words and across unknown single characters, see `_cjk_words`); `bigrams`: bigrams only.
The last two are kept to measure against (`bench/bench_recall.py --cjk`, `bench/bench_tokenizer.py`); on the recall
benchmark `grams` finds most (docs/memory.md)."""

MAX_QUERY_CHARS = 2000
"""A longer query is cut to its first this many characters (never refused)."""
MAX_QUERY_TERMS = 48
MAX_TERM_CHARS = 64
"""A longer token (a hash, base64) is kept as its first this many characters."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_WORD = r"[0-9a-z]+(?:'[a-z]+)?"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>{_WORD}(?:[._\-/:@+#]{_WORD})*)")
_JOINERS = re.compile(r"[._\-/:@+#]")

_ENGLISH = """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few
    for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
    himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was wasn't we we'd
    we'll we're we've were weren't what what's when when's where where's which while who who's whom why why's will
    with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves also just s t"""
_CHINESE = """的 了 着 过 是 在 和 与 及 或 就 都 也 还 又 而 但 把 被 让 给 对 从 向 往 于 以 之 其
    这 那 这个 那个 这些 那些
    我 你 您 他 她 它 我们 你们 他们 她们 咱们 自己 吗 呢 吧 啊 呀 嘛 哦 哈 嗯 么 什么 怎么 怎样 怎么样 哪 哪里 哪儿
    哪个 哪些 谁 多少 几 为什么 是否 有没有 是不是 请问 请 一下 一个 个 有 没有 要 会 能 可以 吗 地 得 所 等"""
ENGLISH_STOP_WORDS = frozenset(_ENGLISH.split())
CHINESE_FUNCTION_WORDS = frozenset(_CHINESE.split())
STOP_WORDS = ENGLISH_STOP_WORDS | CHINESE_FUNCTION_WORDS

_QUESTION = re.compile(
    r"什么时候|什么|多少|哪里|哪儿|哪个|哪些|哪家|哪天|哪|谁|吗|呢|怎么样|怎么|为什么|是否|是不是|有没有|请问|干什么|干嘛|干啥|啥|咋"
    r"|\bwhat (?:kind|sort|type)s? of\b|\bthese days\b|\bnowadays\b|\b(?:do|did) you (?:remember|know|recall)\b"
    r"|\bhow (?:long|many|much|often)\b|\brecently\b|\blately\b|\bstill\b|\bwhat (?:happened|happens)\b"
)
"""Question words a query drops before it is cut: an answer seldom holds them (and "still" favours the older
statement of a changed fact, "I'm still driving the Fiesta"; "what happened", greetings, "what's been happening?"),
and in Chinese they would otherwise join their neighbours into bigrams (陈晨哪天出生 → 晨哪, 哪天) that no answer
holds either."""

_PARTICLES = re.compile(r"[的了]")
"""Chinese particles a query is cut at: 阿梅的母亲出了什么事 asks about 阿梅, 母亲, 出事, never 梅的, 的母 or 出了,
bigrams across a word's edge that match unrelated text (翻出了)."""

_PHRASES = {
    "for a living": "job",
    "line of work": "job",
    "in (?:his|her|their|your|my) free time": "hobby",
    "get to work": "commute",
    r"(?:can't|cannot) (?:\w+ )?eat": "diet",
    "get around": "commute",
    r"work(?:s|ing)? (?:nights|days)": "shift work",
    "(?:怎么|咋)(?:出门|出行|上班|去上班)": "出门 通勤",
    "(?:是|在)?(?:干|做)(?:什么|啥)(?:工作|职业)?的(?=$|[?？。!！\\s])": "工作",
}
_PHRASE = re.compile("|".join(rf"\b{p}\b" if p.isascii() else p for p in _PHRASES))
"""Phrases of a question whose words would mislead (living → live, a home word) or that a question word would
drop (老赵是干什么的: his job), searched as the word they mean (a Chinese one without word edges: none inside a run of
characters)."""

_stemmer = Stemmer.Stemmer("english")
_CACHED_TOKENS = 50_000
_CACHED_TOKEN_CHARS = 12
"""Tokens whose terms are kept (per CJK mode; at most this many, of at most this many characters: a word or a short
run, the ones chat repeats; a long CJK run has a term per character and is seldom seen twice). The cache is emptied
when it is full."""
_TOKEN_TERMS: dict[CjkMode, dict[str, tuple[str, ...]]] = {"grams": {}, "words": {}, "bigrams": {}}

IRREGULAR = """
    become became; begin began begun; break broke broken; bring brought; build built; buy bought;
    catch caught; choose chose chosen; come came; draw drew drawn; drink drank drunk;
    drive drove driven; eat ate eaten; fall fell fallen; feel felt; fight fought; find found; fly flew flown;
    forget forgot forgotten; get got gotten; give gave given; go went gone; grow grew grown; hear heard;
    hold held; keep kept; know knew known; leave left; lend lent; lose lost; make made; meet met; pay paid;
    ride rode ridden; ring rang rung; rise rose risen; run ran; say said; see saw seen; sell sold;
    send sent; shake shook shaken; shoot shot; sing sang sung; sit sat; sleep slept; speak spoke spoken;
    spend spent; stand stood; steal stole stolen; swim swam swum; take took taken; teach taught; tear tore torn;
    tell told; think thought; throw threw thrown; understand understood; wake woke woken; wear wore worn;
    win won; write wrote written; child children; person people; man men; woman women; mouse mice; tooth teeth
    """
"""Each `;`-separated group: the forms of one English word that stemming does not bring together (sold / sell):
a query holding one of them also searches the others."""


def _forms() -> dict[str, tuple[str, ...]]:
    forms: dict[str, tuple[str, ...]] = {}
    for line in IRREGULAR.split(";"):
        group = tuple(dict.fromkeys(_word(w) for w in line.split()))
        for term in group:
            forms[term] = tuple(t for t in group if t != term)
    return forms


def index_terms(text: str, *, cjk: CjkMode | None = None) -> list[str]:
    """The terms of stored text, in order and with repeats (their count is the term frequency). Stop words are
    kept, so a query made only of stop words can still be answered."""
    return _terms(text, cjk or CJK_MODE)


def query_terms(text: str, *, cjk: CjkMode | None = None) -> list[str]:
    """The distinct terms of a query (a question or keywords, any mix of Chinese and English), cut to
    MAX_QUERY_CHARS and MAX_QUERY_TERMS; question words and stop words dropped unless nothing else is left; []
    for punctuation."""
    mode = cjk or CJK_MODE
    text = normalise(text[:MAX_QUERY_CHARS])
    asked = _PARTICLES.sub(" ", _QUESTION.sub(" ", _PHRASE.sub(_phrase_word, text)))
    distinct = list(dict.fromkeys(_terms(asked, mode)))
    content = [t for t in distinct if t not in STOP_WORDS]
    if not content:
        distinct = list(dict.fromkeys(_terms(text, mode)))
    chosen = (content or distinct)[:MAX_QUERY_TERMS]
    forms = [f for t in chosen for f in _FORMS.get(t, ()) if f not in chosen]
    return chosen + list(dict.fromkeys(forms))[: MAX_QUERY_TERMS - len(chosen)]


def _phrase_word(match: re.Match[str]) -> str:
    phrase = match.group(0)
    return " " + next(word for p, word in _PHRASES.items() if re.fullmatch(p, phrase)) + " "


def normalise(text: str) -> str:
    """Full-width forms folded (ＡＢＣ１ → abc1, ，→ ,), lower case, curly apostrophes straightened: NFKC, whose
    commonest work in chat text (full-width ASCII and the ideographic space) is done by a table first, so most
    texts are then found already normalised and not decomposed again (the result is NFKC's all the same: those
    characters are replaced by their own compatibility decomposition)."""
    text = text.translate(_WIDE)
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return text.lower().replace("\u2019", "'")


_WIDE = {0x3000: " "} | {code: chr(code - 0xFEE0) for code in range(0xFF01, 0xFF5F)}
"""Full-width ASCII (U+FF01-U+FF5E) and the ideographic space: what NFKC makes of them."""


def _terms(text: str, cjk: CjkMode) -> list[str]:
    """The terms of `text`, in order. A token (a CJK run or a word) seen before is not cut again: its terms come
    from `_TOKEN_TERMS` (chat repeats its words), so the common case is one dict lookup per token."""
    cache = _TOKEN_TERMS[cjk]
    terms: list[str] = []
    extend = terms.extend
    for run, word in _TOKEN.findall(normalise(text)):
        token = run or word
        known = cache.get(token)
        if known is None:
            known = _token_terms(run, word, cjk)
            if len(token) <= _CACHED_TOKEN_CHARS:
                if len(cache) >= _CACHED_TOKENS:
                    cache.clear()  # bounded; refills with what is common now
                cache[token] = known
        extend(known)
    return terms


def _token_terms(run: str, word: str, cjk: CjkMode) -> tuple[str, ...]:
    if not run:
        return tuple(_latin(word))
    if cjk == "grams":
        return _grams(run)
    return tuple(_cjk_words(run)) if cjk == "words" else _bigrams(run)


def _latin(token: str) -> Iterator[str]:
    """A plain word stemmed; an identifier, code, date or version (`user_id`, `CODE-7Q2`, `2026-12-01`, `v2.3.1`)
    kept whole, then each of its parts."""
    if not _JOINERS.search(token):
        yield _word(token)
        return
    yield token[:MAX_TERM_CHARS]
    for part in _JOINERS.split(token):
        if part:
            yield _word(part)


def _word(word: str) -> str:
    if word in ENGLISH_STOP_WORDS or (not word.isalpha() and "'" not in word):
        return word[:MAX_TERM_CHARS]  # stop words and words with digits (7q2, v2, 2026) are kept as they are
    return _stem(word[:MAX_TERM_CHARS])


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    stemmed: str = _stemmer.stemWord(word)
    return stemmed


def _cjk_words(run: str) -> Iterator[str]:
    """jieba's words (dictionary only, no HMM guessing, so a run is cut the same in a message and in a query),
    plus bigrams where a name may hide: inside words of 3+ characters (张伟明 → 张伟) and across runs of single
    characters the dictionary did not know (李|思|雨 → 李思, 思雨)."""
    singles: list[str] = []
    for word in _cut(run):
        yield word
        if len(word) == 1:
            singles.append(word)
            continue
        if len(singles) > 1:
            yield from _bigrams("".join(singles))
        singles = []
        if len(word) >= 3:
            yield from _bigrams(word)
    if len(singles) > 1:
        yield from _bigrams("".join(singles))


@lru_cache(maxsize=65536)
def _cut(run: str) -> tuple[str, ...]:
    import rjieba  # only the "words" mode segments; imported on first use (about 0.3 s of start-up otherwise)

    return tuple(w for w in rjieba.cut(run, False) if w.strip())


def _grams(run: str) -> tuple[str, ...]:
    """The run's bigrams, then its single characters (a one-character run is that character once)."""
    if len(run) == 1:
        return (run,)
    return (*map(str.__add__, run[:-1], run[1:]), *run)


def _bigrams(run: str) -> tuple[str, ...]:
    if len(run) == 1:
        return (run,)
    return tuple(map(str.__add__, run[:-1], run[1:]))


_FORMS = _forms()
