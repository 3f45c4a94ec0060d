"""The tables `kime.laya.lang` decides with, all Laya 0.4.15's: the Unicode blocks of the scripts
the English checkpoint cannot read, the letters Unicode assigned after 14.0, the function words of
each language Laya names, and the letters and words that mark Latin text as not English. Data
only: `lang` turns the word lists into sets and owns every rule that reads them.
"""
from __future__ import annotations

from typing import Dict, Tuple

# --- scripts ------------------------------------------------------------------------------------

SCRIPT_BLOCKS: Tuple[Tuple[str, Tuple[Tuple[int, int], ...]], ...] = (
    ("greek", ((0x0370, 0x03FF), (0x1F00, 0x1FFF))),
    ("cyrillic", ((0x0400, 0x052F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F))),
    ("armenian", ((0x0530, 0x058F),)), ("hebrew", ((0x0590, 0x05FF),)),
    ("arabic", ((0x0600, 0x06FF), (0x0750, 0x077F), (0x08A0, 0x08FF), (0xFB50, 0xFDFF),
                (0xFE70, 0xFEFF))),
    ("devanagari", ((0x0900, 0x097F), (0xA8E0, 0xA8FF))), ("bengali", ((0x0980, 0x09FF),)),
    ("gurmukhi", ((0x0A00, 0x0A7F),)), ("gujarati", ((0x0A80, 0x0AFF),)),
    ("oriya", ((0x0B00, 0x0B7F),)), ("tamil", ((0x0B80, 0x0BFF),)),
    ("telugu", ((0x0C00, 0x0C7F),)), ("kannada", ((0x0C80, 0x0CFF),)),
    ("malayalam", ((0x0D00, 0x0D7F),)), ("sinhala", ((0x0D80, 0x0DFF),)),
    ("thai", ((0x0E00, 0x0E7F),)), ("lao", ((0x0E80, 0x0EFF),)), ("tibetan", ((0x0F00, 0x0FFF),)),
    ("myanmar", ((0x1000, 0x109F),)), ("georgian", ((0x10A0, 0x10FF),)),
    ("ethiopic", ((0x1200, 0x137F),)), ("khmer", ((0x1780, 0x17FF),)),
    ("hangul", ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))),
    ("kana", ((0x3040, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF))),
    ("han", ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))),
)
"""The blocks of the scripts the English checkpoint cannot read (Laya's table)."""

# Letters that Unicode assigned after 14.0 (and the scripts 14.0 introduced, for 3.10's 13.0): an
# older interpreter calls them unassigned, so `isalpha()` alone would make text in them "no
# letters" on one Python and non-Latin on another. Laya's table, generated from the databases.
LATE_LETTERS: Tuple[Tuple[int, int], ...] = (
    (0x01C89, 0x01C8A), (0x0A7CB, 0x0A7CD), (0x0A7DA, 0x0A7DC), (0x10570, 0x1057A),
    (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595), (0x10597, 0x105A1),
    (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC), (0x105C0, 0x105F3),
    (0x10D4A, 0x10D65), (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x10F70, 0x10F81),
    (0x1123F, 0x11240), (0x11380, 0x11389), (0x1138B, 0x1138B), (0x1138E, 0x1138E),
    (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3),
    (0x11BC0, 0x11BE0), (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33),
    (0x12F90, 0x12FF0), (0x1342F, 0x1342F), (0x13441, 0x13446), (0x13460, 0x143FA),
    (0x16100, 0x1611D), (0x16A70, 0x16ABE), (0x16D40, 0x16D6C), (0x18CFF, 0x18CFF),
    (0x1B132, 0x1B132), (0x1B155, 0x1B155), (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D),
    (0x1E290, 0x1E2AD), (0x1E4D0, 0x1E4EB), (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5F0),
    (0x2B739, 0x2B739), (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF),
)

# --- function words -----------------------------------------------------------------------------

# Laya's lists, in Laya's language order (ties between languages go to the earlier one). The
# Romance lists carry unaccented spellings because pipelines that strip accents leave function
# words as the only evidence; words that are also common English are left out of the others.
STOP_WORDS: Dict[str, str] = {
    "en": """
        after already always and any are aren as at be because been before being between both but
        can could couldn didn didnt does doesn doesnt doing done dont down during each ever every
        few for from has hasn have haven havent here him his how i if in into is isn isnt it ive
        many might much must never nor not of on only onto our please shall she should some than
        that thats the their them then there these they this those through to too until very was
        wasn wasnt we were weren what whats when where which while who whom why will with within
        without won wont would wouldn yet you your youre yours""",
    "fr": """
        alors au aux avec bien bonjour ce ces cette comment dans des deux dois doit donc du elle
        elles est et fait fois il ils je jour jours la le les ma mais merci mes mois mon nous ont ou
        pas peut peux plus pour pourquoi quand que qui sa ses sont sur ta tes ton tous tout toute
        trois très tu une veut veux vous être""",
    "de": """
        aber auch auf aus bei bitte das dem den der dich die diese diesen dieser dieses dir ein eine
        einem einen einer für gibt habe haben heute ich im in ist jetzt kann kannst mein meine
        meinem meinen meiner mich mir mit nach nicht noch oder sich sind und uns von wann was welche
        werden wie wir wird wo wurde zu zum zur""",
    "es": """
        al algo aquí aunque como con cuando del donde dos el entre es esa ese eso esta este esto
        está fue fueron gracias han hay hemos hoy la las le les lo los mi muy más nada necesito ni
        nos para pero por porque puede pueden que quiero se ser sobre son su sus también tengo tiene
        tienen todo tres tu un una y ya""",
    "pt": """
        agora ainda alguem alguém ali antes ao aos aqui as até boa cadê com como consigo da das
        depois deu do dois dos e em entao então era esta estamos estava este estou está eu ficou fiz
        foi gostaria hoje isso isto ja já mais mas meu meus minha minhas muito na nada nao nas
        nenhum nenhuma ninguem ninguém noite nos nossa nosso não o obrigada obrigado olá onde ontem
        os para pela pelo pode podem por porque pra preciso quando que quero sao se ser seu sou sua
        são tambem também tarde tem tenho três tudo tá um uma vc vcs voce voces você vocês é""",
    "it": """
        abbiamo adesso agli alla alle anche ancora avete che ci ciao col come con da dagli dal dalla
        dallo degli dei del della delle dello deve devo devono di dove e ed era fra già gli grazie
        ha hai hanno ho ieri il la le lo mai mi mia mio molto ne negli nel nell nella non o oggi per
        perche più poco quando questa questo scusa sempre si sono stata stato su sua sul sulla sulle
        tra tuo un una uno voglio vorrei è""",
    "nl": """aan dat deze door een het is maar met naar niet ook op te van voor worden
        wordt zijn""",
    "sv": """
        appen aterbetala aterbetalning att behover behöver blivit debiterade dessa detta faktura fel
        från får ganger gång gånger gör göra hittar hjalp hjalpa hjälp hjälpa här installningarna
        installningen inställningarna inställningen inte jag kommer kraschar kvittot losenord
        lösenord mig min mitt måste nar när nästa och också om oppnar paket ska skicka skulle
        sparningen spårningen säger till tva två upp uppdaterats utan vi vill är återbetala
        återbetalning öppnar""",
    "ro": """aceasta această acest acesta acum ale care dar din după este foarte fost fără
        lui mi nu pentru până sunt să trebuie vreau vă în și ți""",
    "bn": """
        abar ajke akhon amader amake amar ami amra apnake apnar apnara apni ar asbe bhai bhalo bolte
        bolun chai chaina dhonnobad dilam dite diye diyechi dorkar duibar ei eita ekbar ekhon ekhono
        ekta ferot geche gese hobe hocche hoise hoye hoyeche hoyni jabe jodi jonno kalke keno keu
        kharap khub ki kibhabe kichu kintu kivabe kobe kokhon korbo korchi kore koreche korechi
        koren korlam korsi korte korun kothay koto lagbe moddhe nai niye oi oita onek ota pabo paini
        parben parbo parchi parchina peyechi sathe shathe shob shomossa somossa tader tahole taka
        theke tomake tomar tomra tumi valo""",
    "az": """
        amma ancaq artiq artıq bir biz bu cox daha deyil də eger görə həm hər ile ilə isə kimi lakin
        mən nə olan olmasa olub onlar siz sonra sən ucun var ve və yalniz yalnız yox yoxdur çox üçün
        əgər""",
}

# Two- and three-word Swedish support fragments are named by these alone; generic words such as
# `fel` or `paket` are not enough. ASCII spellings sit beside the Swedish ones.
SHORT_SWEDISH = """
    abonnemanget aterbetalning atkomst behover behöver betalningen fakturan felmeddelande glomt
    glömt inloggningen installningen inställningen kvitto kvittot losenord lösenord sparningen
    spårningen återbetalning åtkomst"""

# Letters ordinary English does not use: the evidence that catches a Latin-script language with
# no list here (Polish, Czech, Turkish, ...). Matched on lowercased text.
FOREIGN_LETTERS = ("àâäãáåçéèêëíìîïñóòôöõøúùûüýÿßæœăâîșțşţąćęłńśźżčďěňřšťůžőűğı"
                             "āēģīķļņūžđə")

# Words Danish shares with the Swedish list: they may count toward Swedish but never name it.
NORDIC_SHARED = "får hej ja jo kommer mig min nej om skulle tack vi"

# Foreign function words that are also ordinary English words: a repeat counts once, so "do
# more, do less" cannot clear a two-hit bar on one word (`lang` keeps those some list holds).
ONCE_ONLY = "come son do care todo im per plus"
