"""The weeks dev set: one English and one Chinese chat made as the weeks set's, whose misses may be shown and tuned
on (the weeks set itself never is)."""

from __future__ import annotations

from recall_data.casual_kinds import Chat, Q, S

# fmt: off
ROSA_BEN: Chat = (
    ("Rosa", "Ben"),
    [
        S(0, 0, "I'm still doing the books for the garden centre, spreadsheets and compost, glamorous.", "r_job"),
        S(0, 1, "I coach the under-nines football team on Saturdays, they mostly chase the ball in a cluster.",
          "b_coach"),
        S(1, 0, "My brother Luca just moved to Glasgow for a job at the shipyard museum.", "r_luca"),
        S(2, 1, "We bought a second-hand camper van, it's orange and we named it Marmalade.", "b_van"),
        S(3, 0, "I've gone vegan for a month as an experiment, cheese is the hard part.", "r_vegan"),
        S(4, 1, "Took Marmalade to the Lake District last weekend, it broke down outside Keswick.", "b_lakes"),
        S(5, 0, "I'm reading a massive book about the history of salt, it's weirdly gripping.", "r_salt"),
        S(6, 1, "My wife Anika is expecting twins in the spring, we're both terrified and thrilled.", "b_twins"),
        S(7, 0, "The vegan month ended and I'm sticking with it, I don't miss meat at all.", "r_vegan_keep"),
        S(8, 1, "Sold the camper van, the twins need the money more than we need an orange van.", "b_van_sold"),
        S(9, 0, "Visited Luca in Glasgow on Friday, he took me to a ceilidh and I fell over twice.", "r_glasgow"),
        S(10, 1, "The twins arrived on Monday night! A boy and a girl, Max and Nell.", "b_born"),
        S(11, 0, "I got a new job, I'm the finance manager at a theatre now, goodbye compost.", "r_job_new"),
        S(12, 1, "I've handed the football team over to another dad, no time with two babies.", "b_coach_stop"),
        S(13, 0, "I've taken up bouldering, the wall near the theatre is open till ten.", "r_boulder"),
    ],
    [
        Q("Where does Rosa work now?", "changed", (("r_job_new", "finance manager at a theatre"),), ("r_job",)),
        Q("What sport does Ben coach kids in?", "para", (("b_coach", "under-nines football"),)),
        Q("Which city did Rosa's brother move to?", "single", (("r_luca", "moved to glasgow"),)),
        Q("What did Ben and his wife call their van?", "single", (("b_van", "named it marmalade"),)),
        Q("Does Rosa eat meat?", "pref", (("r_vegan_keep", "don't miss meat"),)),
        Q("Where did the camper break down?", "para", (("b_lakes", "outside keswick"),)),
        Q("What is the book Rosa is reading about?", "single", (("r_salt", "history of salt"),)),
        Q("When were Ben's babies born?", "when", (("b_born", "twins arrived on monday"),)),
        Q("What are the names of Ben's kids?", "para", (("b_born", "max and nell"),)),
        Q("Why did Ben get rid of the van?", "after", (("b_van_sold", "twins need the money"),)),
        Q("What happened when Rosa went to a dance in Scotland?", "para", (("r_glasgow", "fell over twice"),)),
        Q("When did Rosa visit her brother?", "when", (("r_glasgow", "visited luca in glasgow"),)),
        Q("Is Ben still coaching?", "changed", (("b_coach_stop", "handed the football team over"),), ("b_coach",)),
        Q("What new hobby did Rosa start climbing-wise?", "pref", (("r_boulder", "taken up bouldering"),)),
        Q("Who is Ben married to, and how many babies was she expecting?", "multi",
          (("b_twins", "my wife anika"), ("b_twins", "expecting twins"))),
    ],
)

AMEI_XIAOYU: Chat = (
    ("阿梅", "小宇"),
    [
        S(0, 0, "我在超市做收银员，过年前后忙得脚不沾地", "m_job"),
        S(0, 1, "我在读研究生，导师天天催论文，头发都快掉光了", "y_study"),
        S(1, 0, "我儿子豆豆这学期开始学围棋了，每周六上午去少年宫", "m_weiqi"),
        S(2, 1, "上周四我去成都开了个学术会议，顺便吃了三顿火锅", "y_chengdu"),
        S(3, 0, "我老公在工地开塔吊，每天早上五点就出门", "m_husband"),
        S(4, 1, "我租的房子在学校东门对面，一个月一千二", "y_rent_old"),
        S(5, 0, "豆豆围棋考级考过了五级，奖励他吃了顿肯德基", "m_weiqi_pass"),
        S(6, 1, "我最喜欢的作家是余华，《活着》看了三遍", "y_author"),
        S(7, 0, "我不在超市干了，跟表姐合伙开了个早餐店，卖包子和豆浆", "m_job_new"),
        S(8, 1, "论文终于答辩通过了！下个月去深圳一家芯片公司上班", "y_job"),
        S(9, 1, "搬到深圳了，住在南山的城中村，离公司骑车十分钟", "y_rent_new"),
        S(10, 0, "早餐店上周三被城管罚了两百块，说我们占道经营", "m_fine"),
        S(11, 1, "我养了两只仓鼠，一只叫芝麻一只叫汤圆", "y_hamster"),
        S(12, 0, "我妈摔了一跤，左腿骨折，我这个月白天开店晚上去医院陪她", "m_mom"),
        S(13, 1, "公司派我去上海出差两周，住在张江", "y_shanghai"),
    ],
    [
        Q("阿梅现在靠什么谋生？", "changed", (("m_job_new", "开了个早餐店"),), ("m_job",)),
        Q("小宇之前在读什么？", "para", (("y_study", "读研究生"),)),
        Q("阿梅的孩子在学什么棋？", "para", (("m_weiqi", "学围棋"),)),
        Q("小宇是哪天去开会的？", "when", (("y_chengdu", "成都开了个学术会议"),)),
        Q("阿梅丈夫的工作是什么？", "para", (("m_husband", "开塔吊"),)),
        Q("豆豆的围棋考到了几级？", "single", (("m_weiqi_pass", "过了五级"),)),
        Q("小宇最爱读谁的书？", "pref", (("y_author", "余华"),)),
        Q("小宇毕业后去了哪家公司？", "after", (("y_job", "芯片公司"),)),
        Q("小宇现在住在哪里？", "changed", (("y_rent_new", "南山的城中村"),), ("y_rent_old",)),
        Q("阿梅的店为什么被罚款？", "single", (("m_fine", "占道经营"),)),
        Q("小宇的宠物叫什么名字？", "single", (("y_hamster", "芝麻"),)),
        Q("阿梅的母亲出了什么事？", "para", (("m_mom", "左腿骨折"),)),
        Q("小宇出差去了哪个城市？", "single", (("y_shanghai", "上海出差"),)),
        Q("阿梅的早餐店卖什么，是和谁一起开的？", "multi", (("m_job_new", "表姐合伙"), ("m_job_new", "包子和豆浆"))),
    ],
)
# fmt: on
