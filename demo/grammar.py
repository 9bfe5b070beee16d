"""The demo grammar: word classes, sentence templates and the true English→German-like translation table.

Hand-written: no package generates a corpus whose word translations, alignments and ambiguity are known
exactly, which the aligner, lexicon, uncertainty and NMT stages are tested and benchmarked against.

A source sentence is one of 13 templates over word classes (DET ADJ NOUN VERB ...: a subordinate clause,
a preposition phrase, a time adverb, "a cup of tea", names with intransitive verbs, questions, a future);
words are drawn per class with Zipf-like weights (p ∝ 1/rank^0.7). Each word translates through
`translation_table()` (~350 words); the target order of each template is its third field (demo/bitext.py).
Two words translate to nothing ("really", "to"), only in one template (1.5 % of pairs). Eight planted
ambiguous words draw their translation at the table's probabilities (2- to 4-way); every other word has
exactly one. There are no one-to-two translations on purpose: a lexicon that counts links would give such
a word H = ln 2, as high as the planted words.
"""

from __future__ import annotations

import math

from demo.draws import fragments

# the planted ambiguous words: source word -> {translation: probability}
AMBIGUOUS: dict[str, dict[str, float]] = {
    "bank": {"bank": 0.5, "ufer": 0.5},
    "light": {"hell": 0.6, "leicht": 0.4},
    "spring": {"frühling": 0.5, "feder": 0.3, "quelle": 0.2},
    "date": {"datum": 0.5, "termin": 0.3, "dattel": 0.2},
    "runs": {"läuft": 0.4, "rennt": 0.3, "leitet": 0.2, "betreibt": 0.1},
    "ball": {"ball": 0.7, "fest": 0.3},
    "fair": {"gerecht": 0.7, "blond": 0.3},
    "on": {"auf": 0.6, "am": 0.4},
}
# class -> "en:de" items (no ":" keeps the word, an empty de is the null translation); a function word is its
# own class
CLASSES = {
    "D": "the:die a:eine this:diese every:jede my:meine our:unsere his:seine her:ihre",
    "A": """old:alte young:junge light big:große small:kleine red:rote fair green:grüne new:neue good:gute
        bad:schlechte long:lange short:kurze happy:glückliche sad:traurige quiet:ruhige loud:laute cold:kalte
        warm:warme dark:dunkle bright:strahlende cheap:billige expensive:teure strong:starke weak:schwache
        fast:schnelle slow:langsame rich:reiche poor:arme clean:saubere dirty:schmutzige empty:leere full:volle
        heavy:schwere soft:weiche hard:harte sweet:süße wild:wilde strange:seltsame famous:berühmte
        friendly:freundliche tired:müde hungry:hungrige beautiful:schöne blue:blaue""",
    "N": """man:mann bank woman:frau child:kind spring dog:hund house:haus ball car:auto city:stadt date
        tree:baum garden:garten river:fluss book:buch table:tisch chair:stuhl door:tür window:fenster
        teacher:lehrer student:student doctor:arzt farmer:bauer king:könig queen:königin bird:vogel horse:pferd
        fish:fisch mountain:berg lake:see sea:meer street:straße school:schule church:kirche station:bahnhof
        train:zug bus:bus ship:schiff plane:flugzeug letter:brief picture:bild song:lied story:geschichte
        friend:freund brother:bruder sister:schwester mother:mutter father:vater baker:bäcker cook:koch
        girl:mädchen boy:knabe apple:apfel key:schlüssel bed:bett room:zimmer kitchen:küche shop:laden
        market:markt village:dorf forest:wald field:feld flower:blume stone:stein bridge:brücke road:weg
        island:insel castle:burg tower:turm wall:mauer roof:dach floor:boden clock:uhr phone:telefon
        computer:rechner lamp:lampe newspaper:zeitung film:film game:spiel team:mannschaft player:spieler
        guest:gast neighbour:nachbar soldier:soldat artist:künstler singer:sänger writer:autor painter:maler
        hunter:jäger driver:fahrer pilot:pilot nurse:pfleger judge:richter thief:dieb prince:prinz
        princess:prinzessin mouse:maus cow:kuh pig:schwein sheep:schaf wolf:wolf bear:bär fox:fuchs duck:ente
        goat:ziege egg:ei hat:hut coat:mantel shoe:schuh ring:ring gift:geschenk money:geld ticket:fahrkarte
        map:karte boat:boot bicycle:fahrrad engine:motor hospital:krankenhaus office:büro hotel:hotel
        museum:museum library:bibliothek park:park farm:hof factory:fabrik airport:flughafen harbour:hafen
        sun:sonne moon:mond star:stern cloud:wolke snow:schnee wind:wind storm:sturm""",
    "V": """sees:sieht likes:mag runs finds:findet buys:kauft calls:anruft sells:verkauft paints:malt
        builds:baut opens:öffnet closes:schließt reads:liest writes:schreibt visits:besucht helps:hilft
        knows:kennt loves:liebt hates:hasst carries:trägt needs:braucht takes:nimmt brings:bringt gives:gibt
        cleans:putzt watches:beobachtet meets:trifft forgets:vergisst catches:fängt throws:wirft breaks:bricht
        repairs:repariert draws:zeichnet hears:hört feeds:füttert pushes:schiebt pulls:zieht drives:lenkt
        chooses:wählt steals:stiehlt hides:versteckt misses:vermisst""",
    "B": """see:sehen like:mögen find:finden buy:kaufen sell:verkaufen paint:malen build:bauen open:öffnen
        read:lesen write:schreiben visit:besuchen help:helfen know:kennen love:lieben carry:tragen
        need:brauchen take:nehmen bring:bringen wash:waschen meet:treffen""",
    "I": """sleeps:schläft laughs:lacht arrives:ankommt cries:weint sings:singt departs:abfährt dances:tanzt
        waits:wartet works:arbeitet returns:zurückkehrt swims:schwimmt falls:fällt smiles:lächelt
        listens:lauscht jumps:springt walks:geht talks:redet travels:reist wins:gewinnt loses:verliert""",
    "J": """sleep:schlafen laugh:lachen sing:singen dance:tanzen wait:warten work:arbeiten swim:schwimmen
        travel:reisen win:gewinnen walk:gehen""",
    "T": """today:heute yesterday:gestern now:jetzt tonight:abends often:oft always:immer abroad:auswärts
        never:nie soon:bald again:wieder later:später upstairs:oben early:früh downstairs:unten
        everywhere:überall here:hier there:dort sometimes:manchmal slowly:langsam quickly:rasch""",
    "P": "in:in on with:mit near:nahe behind:hinter under:unter from:aus for:für without:ohne at:bei",
    "M": "cup:tasse glass:glas bottle:flasche piece:stück box:kiste bag:tüte bowl:schüssel plate:teller",
    "F": """tea:tee coffee:kaffee water:wasser milk:milch bread:brot cheese:käse rice:reis soup:suppe wine:wein
        juice:saft sugar:zucker cake:kuchen fruit:obst butter:butter honey:honig salt:salz""",
    "K": "anna peter maria thomas lukas sophie jonas lena paul clara felix emma david sarah tom",  # names: kept
    **{
        w.partition(":")[0]: w
        for w in ["that:dass", "because:weil", "will:wird", "wants:will", "of:von", "does:tut", "really:", "to:"]
    },
}
# (weight, source classes, target order as source slot indexes)
TEMPLATES = [
    (0.17, "D A N V D N", None),
    (0.13, "D N V D A N P D N", None),
    (0.09, "D N V that D N V D N", [0, 1, 2, 3, 4, 5, 7, 8, 6]),  # verb-final subordinate clause
    (0.09, "D A N V D N T", [0, 1, 2, 3, 6, 4, 5]),  # time adverb before the object
    (0.07, "K V D M of F", None),  # "a cup of tea" -> "eine tasse tee"
    (0.07, "K I T", None),
    (0.09, "P D N D N V D N", [0, 1, 2, 5, 3, 4, 6, 7]),  # verb second after a fronted phrase
    (0.07, "D N I because D N V D A N", [0, 1, 2, 3, 4, 5, 7, 8, 9, 6]),
    (0.06, "D A A N I T", None),
    (0.05, "K I", None),
    (0.05, "does K B D N", [0, 1, 3, 4, 2]),  # question: "tut peter ein mädchen finden", infinitive last
    (0.045, "K will B D N T", [0, 1, 5, 3, 4, 2]),  # infinitive last
    (0.015, "K really wants to J", None),  # "really", "to" -> nothing: 5 -> 3 words, over a 1.5 length ratio
]


def _build_grammar() -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """(source word -> {translation: p}, class -> its words in rank order), checking one table row per word."""
    table: dict[str, dict[str, float]] = {}
    classes: dict[str, list[str]] = {}
    for cls, spec in CLASSES.items():
        classes[cls] = []
        for item in spec.split():
            en, _, de = item.partition(":")
            trans = AMBIGUOUS.get(en) or {de if ":" in item else en: 1.0}
            if table.setdefault(en, trans) != trans:
                raise AssertionError(f"demo grammar: {en!r} has two translations")
            classes[cls].append(en)
    return table, classes


TABLE, CLASS_WORDS = _build_grammar()
SOURCE_WORDS = list(TABLE)  # source word ids
WORD_ID = {w: i for i, w in enumerate(SOURCE_WORDS)}
PAD_WORD = len(SOURCE_WORDS)  # the padding word id: the "" word after the table's
WORDS = fragments(SOURCE_WORDS + [""])  # word id -> its line fragment (row 0 first in a line, row 1 led by " ")
LMAX = max(len(t[1].split()) for t in TEMPLATES)  # the longest template, in slots


def translation_table() -> dict[str, dict[str, float]]:
    """The true table: source word -> {translation: probability}; "" is the null translation (no target word)."""
    return {w: dict(t) for w, t in TABLE.items()}


def ambiguous_words() -> list[str]:
    """The planted source words with more than one translation."""
    return list(AMBIGUOUS)


def word_entropy() -> dict[str, float]:
    """H(w) = −Σ_t p(t|w) ln p(t|w) of every source word (natural log, as the lexicon of thesis ch. 6)."""
    return {w: -sum(p * math.log(p) for p in t.values()) for w, t in TABLE.items()}
