"""Related words a query is widened with (a small hand-written thesaurus of everyday life, Chinese and English): a
question and its answer often share no word ("Where does Evan
live?" / "new address: apartment 12C"), and the nearest English derivations stemming leaves apart (move / mover,
dietary / diet). Searched with a lower weight than the query's own words (`rerank`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from agenthub.search import text
from agenthub.search.categories import member_terms

THESAURUS = """
    car vehicle drive truck suv sedan hatchback 车 汽车 开车 新车 提车 买车
    live home house apartment flat address unit lease rent move moved 住 房子 公寓 地址 小区 租房 搬家 搬到
    job work employer company office hired career position role 工作 上班 公司 单位 入职 跳槽 offer
    job work profession occupation 工作 职业 谋生 干活 行业
    trip travel vacation holiday destination flight tour ~booked visit 旅行 旅游 度假 出游 机票 行程
    restaurant eat dinner lunch food place cuisine 餐厅 馆子 饭店 吃饭 好吃 菜
    drink coffee tea latte order cafe cup 喝 咖啡 奶茶 拿铁 茶
    instrument play lessons piano guitar violin drums saxophone ukulele cello 乐器 钢琴 吉他 小提琴 鼓 萨克斯 古筝
    music band song singer artist album concert gig listen 音乐 乐队 歌 歌手 演唱会 听歌
    language learn study lessons class course speak fluent 语言 外语 学习 英语 日语 法语 德语 口语
    book novel read reading author writer novelist chapter 书 读 小说 看书 读书 作者 作家
    pet dog cat puppy kitten adopted named 宠物 狗 猫 小猫 小狗 领养 养
    sibling brother sister 兄弟 姐妹 哥哥 弟弟 姐姐 妹妹
    child kid son daughter baby twins boy girl 孩子 小孩 儿子 女儿 宝宝 闺女 娃娃 男孩 女孩
    partner boyfriend girlfriend wife husband dating relationship together 对象 男朋友 女朋友 老婆 老公 恋爱 在一起
    wife husband spouse partner fiance fiancee 老婆 老公 丈夫 妻子 爱人 媳妇 对象
    birthday born birth age turned 生日 出生 岁
    hometown grew raised originally from 老家 家乡 长大 哪里人
    doctor physician dentist clinic hospital appointment checkup 医生 大夫 医院 看病 挂号 体检 牙医
    gym workout exercise fitness training yoga running 健身 锻炼 运动 健身房 跑步
    school college university major degree enrolled 学校 大学 专业 上学 读书
    phone number mobile cell 手机 号码 电话 尾号
    laptop computer pc notebook 电脑 笔记本
    diet allergic allergy intolerant intolerance vegetarian vegan gluten lactose dairy 忌口 过敏 吃素 不耐受
    wedding married marry anniversary ceremony 婚礼 结婚 纪念日 喜酒
    code password passcode pin gate keypad wifi 密码 门禁 暗号
    name named called nickname 名字 叫 名叫 取名 小名
    team league match game sport 球队 比赛 联赛 运动
    parking garage spot 停车 车位 车库
    train ticket seat flight rebooked 火车 高铁 车次 航班 座位 改签 停运
    package parcel delivery order shipped tracking 快递 包裹 订单 单号
    deadline due submit 截止 期限
    paint painting painted watercolor canvas sketch drawing artwork 画 画画 水彩 油画 素描
    hurt injury injured sprained broke fracture cast 受伤 扭伤 骨折 摔伤
    race marathon 10k half-marathon runner 马拉松 跑步 比赛
    volunteer volunteering charity donate donation 志愿者 义工 公益 捐款 义诊
    promoted promotion raise title manager lead 升职 晋升 加薪 升了
    mom mother dad father parents grandmother grandfather grandma grandpa 妈妈 爸爸 父母 奶奶 外婆 爷爷 外公
    mom mum mother dad father 妈妈 爸爸 母亲 父亲 老妈 老爸 我妈 我爸
    therapist therapy counselor counseling anxiety 心理 咨询 焦虑
    cook cooking recipe bake baking dish 做饭 菜谱 烘焙 下厨 做菜
    garden gardening plant plants grow growing balcony 花园 种花 植物 阳台 种菜
    engaged engagement fiance fiancee propose proposed proposal 订婚 求婚 未婚妻 未婚夫
    choir sing singing alto soprano tenor baritone 合唱 合唱团 唱歌 声部 女高音 女低音 男高音
    surgery operation operated stitches 手术 开刀 动手术
    shift shifts overtime rota 夜班 白班 早班 晚班 倒班 加班
    ride riding bike bicycle cycle cycling scooter moped motorbike motorcycle 骑车 单车 自行车 电动车 摩托 电瓶车
    """
"""Each line: words that answer or ask about the same thing. One CJK character stands alone only where it is the
usual word (车, 猫); longer Chinese words count by their two-character pairs. A word marked `~` is reached from its
line but does not reach it: its stem is another everyday word's ("booked" is "book": a trip may be booked, a book
is no trip)."""

MAX_RELATED = 24
"""At most this many related terms widen one query."""


def related_terms(terms: Sequence[str]) -> list[str]:
    """The terms related to the query `terms` (not among them, no stop word), in the order their groups are met
    (at most MAX_RELATED), then the members of the categories they name (`categories`), then their derivations
    (at most MAX_DERIVED)."""
    groups = _groups(text.CJK_MODE)
    have = set(terms)
    out: dict[str, None] = {}
    for term in terms:
        for group in groups.get(term, ()):
            out.update((other, None) for other in group if other not in have and other not in text.STOP_WORDS)
    chosen = list(out)[:MAX_RELATED]
    members = member_terms(terms, taken=chosen)
    taken = have | set(chosen) | set(members)
    derived = dict.fromkeys(f for term in terms for f in derived_forms(term) if f not in taken)
    return [*chosen, *members, *list(derived)[:MAX_DERIVED]]


AGENT_SUFFIXES = ("er", "or", "ist", "ian")
"""English derivation stemming leaves apart: move / mover, counsel / counselor, art / artist, diet / dietary."""
MAX_DERIVED = 8


def derived_forms(term: str) -> list[str]:
    """The stems of an English word's nearest derivations (the doer: mover, runner, counselor, artist; and back from
    it, with -ary: dietary → diet), as the index holds them; none for a term with a digit, a joiner or a CJK
    character, or shorter than 3 letters."""
    if len(term) < 3 or not term.isascii() or not term.isalpha():
        return []
    bases = [
        base
        for suffix in (*AGENT_SUFFIXES, "ari")
        if term.endswith(suffix) and len(term) - len(suffix) >= 3
        for stem in [term[: -len(suffix)]]
        for base in ([stem] if stem.endswith("e") else [stem, stem + "e"])
    ]
    if bases:  # already a derivation: back to its base only
        return list(dict.fromkeys(bases))
    root = term[:-1] if term.endswith("e") else term
    forms = [root + suffix for suffix in AGENT_SUFFIXES]
    if term[-1] not in "aeiouwxy" and term[-2] in "aeiou" and term[-3] not in "aeiou":
        forms.insert(1, term + term[-1] + "er")  # run → runner
    return forms


@lru_cache(maxsize=4)
def _groups(mode: text.CjkMode) -> dict[str, tuple[tuple[str, ...], ...]]:
    by_term: dict[str, list[tuple[str, ...]]] = {}
    for group, reaching in _parse(mode):
        for term in reaching:
            by_term.setdefault(term, []).append(group)
    return {term: tuple(groups) for term, groups in by_term.items()}


def _parse(mode: text.CjkMode) -> Iterable[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each line's terms, and those of them that reach the line (all but the `~` words)."""
    for line in THESAURUS.strip().splitlines():
        terms: dict[str, None] = {}
        reaching: dict[str, None] = {}
        for word in line.split():
            made = text.index_terms(word.lstrip("~"), cjk=mode)
            if len(made) > 1:  # a Chinese word: its pairs, not its single characters
                made = [t for t in made if len(t) > 1] or made
            terms.update(dict.fromkeys(made))
            if not word.startswith("~"):
                reaching.update(dict.fromkeys(made))
        if len(terms) > 1:
            yield tuple(terms), tuple(t for t in terms if t in reaching)
