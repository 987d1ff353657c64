"""The long set's first two English chats (tuned on: their misses may be looked at)."""

from __future__ import annotations

from recall_data.long_kinds import F

# fmt: off
ROSA_DANIEL = (
    ("Rosa", "Daniel"),
    [
        F(6, 1, "Finally traded in the Odyssey! I'm driving a used Mazda CX-5 now and honestly it feels like a "
          "spaceship after that old van.", "What car does Daniel drive now?", "used Mazda CX-5", "changed",
          old=(0, "The minivan's transmission is acting up again. That Honda Odyssey has seen better days, I swear it "
               "groans every time I merge onto the highway.")),
        F(1, 0, "I went to the open studio night at the community center yesterday and threw my first pot on the "
          "wheel. It's lopsided but it's mine.", "When did Rosa go to the open studio night?", "threw my first pot",
          "when"),
        F(1, 1, "Big news in our house: Lily lost her first tooth at breakfast this morning, she won't stop showing "
          "everyone the gap.", "What did Daniel's daughter lose?", "lost her first tooth", "did"),
        F(2, 0, "You've been teaching chemistry at Westbrook High for what, nine years now {other}? You must have seen "
          "every kind of lab explosion.", "Where does Daniel teach?", "chemistry at Westbrook High", "other"),
        F(2, 1, "Ha, close. Nine in September. The worst was a kid who set his own eyebrows on fire with a Bunsen "
          "burner.", "How long has Daniel been teaching?", "Nine in September"),
        F(0, 0, "Biscuit chewed through another charging cable last night. Beagles are adorable little menaces.",
          "What breed is Rosa's dog?", "Beagles are adorable", "single"),
        F(3, 0, "I signed up for the Harbor Half Marathon in October, so my evenings are going to be all running "
          "for a while.", "Which race did Rosa sign up for?", "Harbor Half Marathon", "did"),
        F(3, 1, "I played bass with the band at The Copper Kettle on Saturday, first gig in like two years. My "
          "fingers are still sore.", "When did Daniel play a gig at The Copper Kettle?", "The Copper Kettle", "when"),
        F(4, 0, "Night shifts in the ICU are brutal this month, I've done six in a row and I'm running on vending "
          "machine coffee.", "Which unit does Rosa work in?", "Night shifts in the ICU"),
        F(4, 1, "My mom's moving in with us in spring, we're turning the den into a bedroom for her.",
          "Who is moving in with Daniel?", "mom's moving in with us"),
        F(5, 0, "I finished the watercolor of the lighthouse at Point Reyes, the one from our trip. Going to frame it "
          "for my sister.", "What did Rosa paint?", "watercolor of the lighthouse", "did"),
        F(5, 1, "Lily decided she wants to be a paleontologist. Every sentence now has a dinosaur in it.",
          "What does Lily want to be when she grows up?", "wants to be a paleontologist"),
        F(7, 1, "We went apple picking at Hillcrest Orchard last weekend, came home with about forty pounds of "
          "Honeycrisps.", "When did Daniel go apple picking?", "apple picking at Hillcrest Orchard", "when"),
        F(7, 0, "Your lasagna at the potluck was the best thing there {other}, you have to give me the recipe, the "
          "one with the spinach layer.", "What did Daniel bring to the potluck?", "Your lasagna at the potluck",
          "other"),
        F(8, 0, "I'm allergic to shellfish, so that seafood place is out for me, sorry! Anywhere else works.",
          "What is Rosa allergic to?", "allergic to shellfish"),
        F(8, 1, "I've been reading a biography of Marie Curie before bed, it's surprisingly gripping.",
          "What book is Daniel reading?", "biography of Marie Curie", "did"),
        F(9, 0, "Moved into the new apartment on Juniper Street on Sunday, everything is still in boxes.",
          "Where does Rosa live now?", "apartment on Juniper Street", "changed",
          old=(1, "My landlord on Cedar Avenue is raising the rent again, I might have to move out of that place.")),
        F(9, 1, "I started learning Portuguese on an app, my goal is to order dinner in Lisbon next summer without "
          "pointing at the menu.", "What language is Daniel learning?", "learning Portuguese", "did"),
        F(10, 0, "My brother Marco just got engaged to his girlfriend of six years, the wedding's in June.",
          "Who got engaged?", "brother Marco just got engaged"),
        F(10, 1, "I sprained my ankle playing pickup basketball on Thursday, so I'm hobbling around the classroom "
          "now.", "How did Daniel hurt his ankle?", "sprained my ankle playing pickup basketball", "did"),
        F(11, 0, "I got the charge nurse position! Starting next month I'll be running the night team.",
          "What position did Rosa get?", "charge nurse position", "did"),
        F(11, 1, "Lily's favorite food is still plain buttered noodles, no matter what I try to cook.",
          "What is Lily's favorite food?", "plain buttered noodles"),
        F(6, 0, "You told me your band is called The Late Bloomers, right {other}? I want to put it in my phone so I "
          "catch the next show.", "What is the name of Daniel's band?", "The Late Bloomers", "other"),
        F(2, 0, "My grandmother taught me to knit when I was eight, I still have the ugly green scarf I made.",
          "Who taught Rosa to knit?", "grandmother taught me to knit"),
        F(4, 1, "I'm the one coaching Lily's soccer team this fall, the Purple Penguins, God help me.",
          "What team does Daniel coach?", "Purple Penguins"),
        F(10, 0, "Biscuit turned seven on Tuesday, we celebrated with a peanut butter pupcake.",
          "How old is Biscuit?", "Biscuit turned seven", "single"),
    ],
)
# fmt: on

# fmt: off
HANNAH_KOFI = (
    ("Hannah", "Kofi"),
    [
        F(0, 1, "I'm still at the logistics startup, mostly writing route optimisation code for delivery vans.",
          "What does Kofi work on at his job?", "route optimisation code"),
        F(0, 0, "I adopted a rescue cat last week! She's a grey tabby and I named her Pickle.",
          "What is the name of Hannah's cat?", "named her Pickle", "single"),
        F(1, 1, "I ran my first 10K on Sunday morning, finished in 52 minutes, my legs are jelly.",
          "When did Kofi run his first 10K?", "ran my first 10K", "when"),
        F(1, 0, "{other}, your sourdough starter has a name now, doesn't it? Gerald, right? You talk about him like "
          "he's a pet.", "What is Kofi's sourdough starter called?", "Gerald, right", "other"),
        F(2, 0, "I'm taking a ceramics class on Wednesday nights at the art school downtown.",
          "What class does Hannah take on Wednesdays?", "ceramics class on Wednesday nights"),
        F(2, 1, "My sister Abena is visiting from Accra next month, first time she's seen snow.",
          "Who is visiting Kofi from Accra?", "sister Abena is visiting from Accra"),
        F(3, 0, "I've switched to the night bus route since they closed the station near me, it takes forever.",
          "How does Hannah get to work now?", "night bus route", "changed",
          old=(0, "I still bike to work every day, about twenty minutes along the canal, best part of my day.")),
        F(3, 1, "Yesterday I finally fixed the leaking kitchen tap myself, a YouTube video and a lot of swearing.",
          "When did Kofi fix the kitchen tap?", "fixed the leaking kitchen tap", "when"),
        F(4, 0, "I painted the whole bedroom a deep forest green over the weekend, it looks like a cozy cave now.",
          "What color did Hannah paint her bedroom?", "deep forest green", "did"),
        F(4, 1, "I got tickets to see Arlo Parks in March, the show sold out in ten minutes.",
          "Which concert did Kofi get tickets for?", "tickets to see Arlo Parks", "did"),
        F(5, 0, "My therapist suggested journaling every morning and weirdly it's helping with the anxiety.",
          "What did Hannah's therapist suggest?", "journaling every morning"),
        F(5, 1, "I've started volunteering at the food bank on Saturdays, sorting donations mostly.",
          "Where does Kofi volunteer?", "volunteering at the food bank", "did"),
        F(6, 1, "You still play the cello in that community orchestra, don't you {other}? My cousin wants lessons.",
          "What instrument does Hannah play?", "play the cello", "other"),
        F(6, 0, "I do! We have a concert at St. Mary's church in December, mostly Dvořák.",
          "Where is Hannah's orchestra concert?", "St. Mary's church in December"),
        F(7, 1, "We went camping at Lake Tahoe over the long weekend, saw a bear from a very safe distance.",
          "When did Kofi go camping at Lake Tahoe?", "camping at Lake Tahoe", "when"),
        F(7, 0, "I'm vegetarian since January, so your barbecue invite is sweet but I'll bring my own halloumi.",
          "Since when has Hannah been vegetarian?", "vegetarian since January"),
        F(8, 0, "Pickle knocked my grandmother's vase off the shelf this morning, it shattered into a million pieces.",
          "What did Pickle break?", "grandmother's vase off the shelf", "did"),
        F(8, 1, "I'm thinking about going back to school for a master's in urban planning.",
          "What degree is Kofi thinking about?", "master's in urban planning"),
        F(9, 1, "I got promoted to team lead today, I'm in charge of four developers now.",
          "What role did Kofi get?", "promoted to team lead", "changed",
          old=(2, "Still a regular developer on the routing team, they keep saying a promotion is coming soon.")),
        F(9, 0, "My birthday is on the 14th of May, and yes, I expect cake.",
          "When is Hannah's birthday?", "14th of May"),
        F(10, 0, "I went to the support group for new managers last Tuesday, it was nice to hear everyone's as lost "
          "as me.", "When did Hannah go to the support group?", "support group for new managers", "when"),
        F(10, 1, "Abena taught me how to make proper jollof rice while she was here, I've made it three times since.",
          "What did Abena teach Kofi to cook?", "proper jollof rice", "did"),
        F(11, 1, "You mentioned your dad was a sailor in the navy, {other}, did he ever take you out on a boat?",
          "What did Hannah's father do?", "dad was a sailor in the navy", "other"),
        F(11, 0, "I'm saving up for a trip to Japan next spring, I want to see the cherry blossoms in Kyoto.",
          "Where is Hannah planning to travel?", "trip to Japan next spring"),
        F(3, 1, "I'm lactose intolerant, so no milkshake for me, but I'll happily steal your fries.",
          "What can't Kofi eat?", "lactose intolerant"),
        F(6, 1, "My favourite movie is still Spirited Away, I watch it every winter.",
          "What is Kofi's favorite movie?", "Spirited Away"),
    ],
)
# fmt: on
