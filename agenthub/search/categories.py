"""What a category word asks for: its everyday members ("which sport" → tennis, swimming …; "什么运动" → 羽毛球 …), a
small hand-written table of general English and Chinese vocabulary. A question names the kind of thing; its answer
names the thing ("What instrument does she play?" / "I practise the cello"), so the query is widened with the
members of every category it names (one way: a member does not reach its category or the other members)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import lru_cache

from agenthub.search import text

CATEGORIES = """
    sport sports exercise workout 运动 体育 锻炼: football soccer basketball tennis badminton squash golf rugby
        cricket baseball hockey volleyball swimming cycling running jogging climbing skiing snowboarding surfing
        boxing karate yoga pilates hiking rowing skating marathon gym 足球 篮球 网球 羽毛球 乒乓球 排球 游泳 跑步
        骑行 爬山 登山 攀岩 滑雪 瑜伽 健身 徒步
    instrument instruments 乐器: piano guitar violin cello drums flute clarinet saxophone trumpet trombone harp
        ukulele keyboard banjo accordion 钢琴 吉他 小提琴 大提琴 架子鼓 长笛 萨克斯 古筝 二胡 琵琶 笛子 尤克里里
    animal animals pet pets 动物 宠物: dog puppy cat kitten rabbit hamster parrot bird tortoise turtle fish
        goldfish horse pony snake lizard 狗 猫 兔子 仓鼠 鹦鹉 乌龟 金鱼 鱼 马
    job jobs work profession occupation career 职业 工作: teacher nurse doctor engineer mechanic developer programmer
        designer chef lawyer accountant police officer manager driver pilot farmer scientist researcher consultant
        barista waiter architect pharmacist dentist electrician plumber librarian journalist shift 老师 教师 护士
        医生 工程师 程序员 设计师 厨师 律师 会计 司机 警察 记者 经理 销售 上班 药剂师 出纳 收银员 保安 快递员 外卖员
        客服 前台 导游 翻译 保姆 店长 主管 消防员 理发师 摄影师 hygienist paramedic ranger bookkeeper cashier
        receptionist cleaner carpenter builder firefighter hairdresser baker translator tutor lecturer professor
        surgeon vet therapist counselor technician analyst
    subject 科目 学科: math maths mathematics physics chemistry biology history geography literature economics
        science art 数学 语文 物理 化学 生物 历史 地理 英语 美术
    cuisine food dish meal 美食 菜系: italian chinese japanese indian thai mexican korean french greek turkish
        vietnamese pizza pasta sushi curry ramen noodles burger tacos dumplings steak salad soup 川菜 粤菜 湘菜 火锅
        烧烤 日料 西餐 面条 饺子 包子 寿司 披萨 汉堡
    meat 肉: bacon steak chicken beef pork lamb ham sausage vegetarian vegan 牛肉 猪肉 羊肉 鸡肉 吃素
    movie movies film films cinema 电影: comedy horror thriller documentary romance action animated cartoon drama
        sci-fi cinema film movie 喜剧 恐怖片 动画 纪录片 爱情片 科幻 动作片
    genre genres 类型: mystery crime thriller fantasy biography memoir poetry comics romance jazz rock pop classical
        folk hip-hop rap blues metal punk opera 推理 科幻 传记 爵士 摇滚 流行 古典 民谣 说唱
    music 音乐: jazz rock pop classical folk hip-hop rap blues metal punk opera band 爵士 摇滚 流行 古典 民谣 说唱
    relative relatives family 亲戚 家人 亲人: mother mum mom father dad sister brother aunt uncle cousin grandmother
        grandma gran grandfather grandpa niece nephew son daughter wife husband parents 爸爸 妈妈 哥哥 姐姐 弟弟
        妹妹 爷爷 奶奶 外公 外婆 叔叔 阿姨 舅舅 姑姑 表哥 表姐 表妹 堂哥
    hobby hobbies pastime activity activities fun relax unwind destress leisure 爱好 兴趣 消遣 放松: painting
        drawing pottery knitting sewing gardening baking cooking reading hiking photography fishing camping gaming
        chess dancing singing writing 画画 书法 摄影 钓鱼 下棋 跳舞 唱歌 烘焙 种花 编织 露营 徒步 游戏
    injury injured hurt 受伤 伤: sprained broke broken fracture tore torn stitches twisted bruised pulled cast 扭伤
        骨折 摔伤 缝针 拉伤
    illness ill sick 病 生病: flu cold fever covid cough migraine infection virus 感冒 发烧 咳嗽 头疼 住院
    weather 天气: rain rained raining sunny sunshine snow snowed cold hot windy storm fog foggy 下雨 晴天 下雪 刮风
        降温
    colour color 颜色: red blue green yellow black white grey gray pink purple orange brown 红色 蓝色 绿色 黄色
        黑色 白色 灰色 粉色 紫色
    language languages dialect 语言 外语 方言: cantonese 粤语 闽南语 上海话 四川话 english french spanish german
        italian japanese korean chinese mandarin
        portuguese arabic russian 英语 法语 西班牙语 德语 意大利语 日语 韩语 中文 普通话
    festival holiday holidays 节日 节: christmas easter thanksgiving halloween 春节 中秋 端午 国庆 元旦 过年
    celebrate celebration party occasion 庆祝 聚会: birthday anniversary wedding graduation christmas 生日 纪念日
        婚礼 毕业
    feel feeling feelings emotion mood 心情 感觉 感受: happy sad excited nervous anxious stressed proud grateful
        upset angry lonely relieved 开心 难过 紧张 焦虑 兴奋 骄傲 生气 孤单
    car cars vehicle drive 车 汽车 开车 新车 款: toyota honda ford bmw audi tesla volvo mercedes volkswagen nissan
        mazda kia hyundai subaru fiat peugeot renault skoda jeep porsche lexus prius civic corolla camry 比亚迪 特斯拉
        宝马 奔驰 大众 丰田 本田 奥迪 日产 小鹏 蔚来 吉利 雅阁 卡罗拉 帕萨特 凯美瑞 思域
    breed 品种: labrador retriever beagle poodle corgi husky terrier spaniel bulldog dachshund collie shepherd pug
        chihuahua greyhound schnauzer siamese persian tabby 柯基 柴犬 金毛 哈士奇 泰迪 拉布拉多 边牧 布偶 英短
    cat cats kitten 猫 猫咪: tabby siamese persian ginger ragdoll 橘猫 布偶 英短 狸花 暹罗
    dog dogs puppy 狗 狗狗: labrador retriever beagle poodle corgi husky terrier spaniel bulldog dachshund collie
        greyhound pug 柯基 柴犬 金毛 哈士奇 泰迪 拉布拉多 边牧
    surgery operation 手术: tonsils appendix knee hip cataract hernia wisdom 扁桃体 阑尾 膝盖 髋关节 白内障
    plant plants flower flowers 植物 花 盆栽: monstera fern cactus succulent orchid basil tomato rose tulip sunflower
        lavender bonsai ivy 龟背竹 多肉 仙人掌 绿萝 兰花 发财树 吊兰 月季 玫瑰 向日葵
    book books novel novels 书 小说: biography memoir mystery thriller fantasy poetry comics autobiography 传记
        推理 科幻 漫画 诗集
    drink drinks coffee 喝 咖啡 饮料: latte cappuccino americano espresso mocha flat white tea matcha smoothie beer wine
        cider 拿铁 美式 卡布奇诺 摩卡 澳白 奶茶 抹茶 啤酒
    company employer firm 公司 单位: inc ltd corp group bank labs studio agency 科技 集团 银行 医疗 教育 数据 传媒
        网络 咨询 互娱
    commute transport 通勤 交通 代步 出行: bus train tube subway metro bike cycle walk drive tram ferry scooter
        motorbike 地铁 公交 骑车 开车 步行 单车 自行车 电动车 电瓶车 摩托
    """
"""Each entry: `category words: member words`. Chinese words count by their two-character pairs, a one-character
word as itself."""

MAX_MEMBERS = 56
"""At most this many member terms widen one query."""


def member_terms(terms: Sequence[str], taken: Collection[str] = ()) -> list[str]:
    """The members of every category the query `terms` name (not among them nor `taken`, no stop word), in the order the
    categories are met, those in the query's script first (Chinese for a query holding Chinese), at most
    MAX_MEMBERS."""
    table = _table(text.CJK_MODE)
    have = {*terms, *taken}
    out: dict[str, None] = {}
    for term in terms:
        out.update((m, None) for m in table.get(term, ()) if m not in have and m not in text.STOP_WORDS)
    chinese = not all(t.isascii() for t in terms)
    return sorted(out, key=lambda m: m.isascii() == chinese)[:MAX_MEMBERS]


@lru_cache(maxsize=4)
def _table(mode: text.CjkMode) -> dict[str, tuple[str, ...]]:
    table: dict[str, dict[str, None]] = {}
    for heads, members in _entries():
        made = dict.fromkeys(m for word in members for m in _word_terms(word, mode))
        for head in (h for word in heads for h in _word_terms(word, mode)):
            table.setdefault(head, {}).update(made)
    return {head: tuple(members) for head, members in table.items()}


def _entries() -> list[tuple[list[str], list[str]]]:
    """The table's entries: a line holding `:` starts one (its category words before the `:`), the lines after it
    without one continue its members."""
    out: list[tuple[list[str], list[str]]] = []
    for line in CATEGORIES.strip().splitlines():
        heads, colon, members = line.partition(":")
        if colon:
            out.append((heads.split(), members.split()))
        else:
            out[-1][1].extend(line.split())
    return out


def _word_terms(word: str, mode: text.CjkMode) -> list[str]:
    made = text.index_terms(word, cjk=mode)
    if len(made) > 1 and not word.isascii():  # a Chinese word: its pairs, not its single characters
        made = [t for t in made if len(t) > 1] or made
    return made
