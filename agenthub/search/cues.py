"""What kind of answer a question asks for, read from its question words ("when" → a time, "how many" → a number,
"where" → a place (in English), "who" → a person, "which book" → a title, "flight number" → a code; 什么时候, 谁,
哪本, 车次), and whether a passage holds one: the second stage lifts passages that do a little, so of two turns on
the asked topic the one that can answer comes first."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|earlier|recently|(?:this|that) (?:morning|afternoon|"
    rf"evening|week|month|year)|{_DAYS}|{_MONTHS}|spring|summer|autumn|fall|winter|christmas|easter"
    r"|\d{1,2}(?:st|nd|rd|th)|(?:19|20)\d\d|\d{1,2}[:.]\d\d|\d{1,2} ?(?:am|pm)|o'clock)\b"
    r"|昨天|今天|明天|前天|后天|大前天|上周|下周|这周|本周|上个?月|下个?月|这个月|[周礼拜星期][一二三四五六日天末]"
    r"|去年|今年|明年|前年|[0-9一二三四五六七八九十]+(?:月|号|日|点|年)|早上|晚上|上午|下午|中午|凌晨|春天|夏天|秋天"
    r"|冬天|春节|国庆|周末|刚才|那天",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|hundred"
    r"|thousand|million|dozen|couple|once|twice|half|first|second|third)\b|[一二两三四五六七八九十百千万半几]",
    re.IGNORECASE,
)
_PLACE = re.compile(
    r"\b(?:in|at|to|from|near|into|around) (?:the )?[A-Z][a-z]+"
    r"|\b(?:street|st|road|rd|avenue|lane|close|city|town|village|park|beach|lake|river|mountain|island|cafe|café"
    r"|restaurant|bar|pub|hotel|station|airport|hospital|clinic|school|college|university|office|shop|store|mall"
    r"|market|centre|center|museum|gym|church|library|flat|apartment|house|cottage)s?\b"
    r"|abroad|downtown",
)
_WHEN = re.compile(
    r"\bwhen\b|\bwhat (?:time|day|date|year|month)\b|\bhow long ago\b|\bwhich (?:day|date|year|month)\b"
    r"|什么时候|哪天|哪一天|几号|几月|哪年|哪一年|何时|几点|啥时候",
    re.IGNORECASE,
)
_HOW_MANY = re.compile(
    r"\bhow (?:many|much|long|old|far|often|big|tall)\b|多少|几个|几次|几岁|多大|多久|多长|多远|多高|几年|几天",
    re.IGNORECASE,
)
_WHERE = re.compile(r"\bwhere\b|\bwhich (?:city|town|country|place|restaurant|cafe|shop)\b", re.IGNORECASE)
"""English only: a Chinese place name carries no mark a pattern can see (住在桂林), and lifting the ones that do
(路, 区) put an older address above the newer one on the bench."""


_PERSON = re.compile(
    r"\b(?:mom|mum|mother|dad|father|parents|sister|brother|wife|husband|partner|boyfriend|girlfriend|son|daughter"
    r"|kids?|aunt|uncle|cousin|grandma|grandpa|gran|nan|niece|nephew|friend|colleague|coworker|boss|neighbou?r"
    r"|roommate|flatmate|teacher|coach|doctor)s?\b|(?:'s|\b(?:with|and|to|from|met|told|asked)) [A-Z][a-z]+"
    r"|妈妈|爸爸|父母|老婆|老公|男朋友|女朋友|对象|儿子|女儿|哥哥|姐姐|弟弟|妹妹|朋友|同事|老板|邻居|室友|同学|老师",
)
_WHO = re.compile(r"\bwho(?:m|se)?\b|\bwith whom\b|谁", re.IGNORECASE)
_TITLED = re.compile(r"《[^》]+》|[\"“][^\"”]{2,60}[\"”]")
_TITLE = re.compile(
    r"\b(?:what|which) (?:book|novel|film|movie|show|series|song|album|play)s?\b|哪本|哪部|哪首|什么书|什么电影|什么歌"
    r"|什么剧|什么小说",
    re.IGNORECASE,
)
_CODED = re.compile(r"\b[a-z]{1,3}\d? ?\d{2,5}\b|\d{3,}|#", re.IGNORECASE)
_CODE = re.compile(
    r"\b(?:flight|train|room|seat|phone|order|tracking|booking|confirmation|reference|gate|door|entry|pin) "
    r"(?:number|code|no)\b|\b(?:code|password|passcode|pin)\b|车次|航班|哪趟|哪班|号码|密码|暗号|单号|门牌|房间号",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AnswerCue:
    """The kind of answer a question asks for (`kind`: when, number, where, who, title or code) and what a passage
    holding one holds."""

    kind: str
    holds: re.Pattern[str]

    def answers(self, passage_text: str) -> bool:
        return _holds(self.holds, passage_text)


@lru_cache(maxsize=8192)
def _holds(pattern: re.Pattern[str], text: str) -> bool:
    """Cached: the same turns come back as candidates query after query."""
    return pattern.search(text) is not None


_CUES = (
    (_WHEN, AnswerCue("when", _TIME)),
    (_HOW_MANY, AnswerCue("number", _NUMBER)),
    (_WHERE, AnswerCue("where", _PLACE)),
    (_TITLE, AnswerCue("title", _TITLED)),
    (_WHO, AnswerCue("who", _PERSON)),
    (_CODE, AnswerCue("code", _CODED)),
)


def answer_cue(question: str) -> AnswerCue | None:
    """The kind of answer `question` asks for, by its first question word of those kinds; None for any other (what,
    who, which, keywords)."""
    found = [(m.start(), cue) for asks, cue in _CUES if (m := asks.search(question)) is not None]
    return min(found, key=lambda f: f[0])[1] if found else None
