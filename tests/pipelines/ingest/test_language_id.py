"""The language identification filter (tasks/ingest/language_id.py, issue 28): twenty ordinary sentences per language
identified as their language, exact decisions and details on hand-written lines, the column-wide py3langid equal to
its ``classify`` row by row, lingua on a few lines, and OpusFilter's ``LanguageIDFilter`` decisions and scores."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from conf.errors import ConfError
from tasks.ingest import language_id as L

SENTENCES = {
    "en": [
        "The children spent the whole afternoon building a sandcastle near the water.",
        "My grandmother always keeps a jar of homemade biscuits on the kitchen table.",
        "We missed the last train home, so we shared a taxi with two strangers.",
        "The museum is closed on Mondays, but the garden behind it stays open.",
        "She has been learning to play the violin since she was seven years old.",
        "After the storm, the whole street was covered in broken branches and leaves.",
        "Could you please remind me to call the dentist before the end of the week?",
        "The new library has more books than I could read in my whole lifetime.",
        "He painted the fence white because his neighbours complained about the old colour.",
        "Most of the students would rather take the exam in the morning than after lunch.",
        "The restaurant around the corner serves the best fish soup in the whole town.",
        "Our flight was delayed by three hours because of fog at the airport.",
        "I usually read the newspaper while I wait for the kettle to boil.",
        "The farmer told us that the apples would be ready to pick next month.",
        "They decided to move to the countryside after their second child was born.",
        "Nobody knew why the old clock in the tower had stopped at midnight.",
        "Please make sure that all the windows are closed before you leave the house.",
        "The football match was cancelled because the pitch was completely flooded.",
        "His sister works as a nurse in a large hospital on the other side of the city.",
        "We walked along the river until the sun went down behind the hills.",
    ],
    "de": [
        "Die Kinder haben den ganzen Nachmittag am Strand eine Sandburg gebaut.",
        "Meine Großmutter hat immer ein Glas mit selbstgebackenen Keksen auf dem Küchentisch.",
        "Wir haben den letzten Zug verpasst und mussten uns deshalb ein Taxi teilen.",
        "Das Museum ist montags geschlossen, aber der Garten dahinter bleibt geöffnet.",
        "Sie lernt schon seit ihrem siebten Lebensjahr, wie man Geige spielt.",
        "Nach dem Sturm war die ganze Straße mit abgebrochenen Ästen und Blättern bedeckt.",
        "Kannst du mich bitte daran erinnern, vor dem Wochenende den Zahnarzt anzurufen?",
        "In der neuen Bibliothek gibt es mehr Bücher, als ich in meinem Leben lesen könnte.",
        "Er hat den Zaun weiß gestrichen, weil sich die Nachbarn über die alte Farbe beschwert haben.",
        "Die meisten Studenten schreiben die Prüfung lieber am Vormittag als nach dem Mittagessen.",
        "Das Restaurant um die Ecke kocht die beste Fischsuppe in der ganzen Stadt.",
        "Unser Flug hatte wegen des dichten Nebels am Flughafen drei Stunden Verspätung.",
        "Ich lese meistens die Zeitung, während ich darauf warte, dass das Wasser kocht.",
        "Der Bauer hat uns erzählt, dass die Äpfel im nächsten Monat reif sein werden.",
        "Nach der Geburt ihres zweiten Kindes sind sie aufs Land gezogen.",
        "Niemand wusste, warum die alte Uhr im Turm um Mitternacht stehen geblieben war.",
        "Bitte schließ alle Fenster, bevor du morgen früh das Haus verlässt.",
        "Das Fußballspiel wurde abgesagt, weil der Platz völlig unter Wasser stand.",
        "Seine Schwester arbeitet als Krankenschwester in einem großen Krankenhaus am anderen Ende der Stadt.",
        "Wir sind am Fluss entlang spazieren gegangen, bis die Sonne hinter den Hügeln verschwand.",
    ],
    "fr": [
        "Les enfants ont passé tout l'après-midi à construire un château de sable sur la plage.",
        "Ma grand-mère garde toujours un bocal de biscuits faits maison sur la table de la cuisine.",
        "Nous avons raté le dernier train, alors nous avons partagé un taxi avec deux inconnus.",
        "Le musée est fermé le lundi, mais le jardin derrière reste ouvert au public.",
        "Elle apprend à jouer du violon depuis qu'elle a sept ans.",
        "Après la tempête, toute la rue était couverte de branches cassées et de feuilles mortes.",
        "Pourrais-tu me rappeler d'appeler le dentiste avant la fin de la semaine ?",
        "La nouvelle bibliothèque contient plus de livres que je ne pourrais en lire dans toute ma vie.",
        "Il a peint la clôture en blanc parce que ses voisins se plaignaient de l'ancienne couleur.",
        "La plupart des étudiants préfèrent passer l'examen le matin plutôt qu'après le déjeuner.",
        "Le restaurant au coin de la rue sert la meilleure soupe de poisson de toute la ville.",
        "Notre vol a été retardé de trois heures à cause du brouillard à l'aéroport.",
        "Je lis généralement le journal pendant que j'attends que l'eau de la bouilloire chauffe.",
        "Le fermier nous a dit que les pommes seraient prêtes à être cueillies le mois prochain.",
        "Ils ont décidé de s'installer à la campagne après la naissance de leur deuxième enfant.",
        "Personne ne savait pourquoi la vieille horloge de la tour s'était arrêtée à minuit.",
        "Assure-toi que toutes les fenêtres sont fermées avant de quitter la maison demain matin.",
        "Le match de football a été annulé parce que le terrain était complètement inondé.",
        "Sa sœur travaille comme infirmière dans un grand hôpital de l'autre côté de la ville.",
        "Nous avons marché le long de la rivière jusqu'à ce que le soleil disparaisse derrière les collines.",
    ],
    "ru": [
        "Дети провели весь день на пляже и построили большой замок из песка.",
        "У моей бабушки на кухонном столе всегда стоит банка с домашним печеньем.",
        "Мы опоздали на последний поезд, поэтому пришлось взять такси вместе с незнакомцами.",
        "По понедельникам музей закрыт, но сад за ним остаётся открытым для всех.",
        "Она учится играть на скрипке с тех пор, как ей исполнилось семь лет.",
        "После грозы вся улица была покрыта сломанными ветками и опавшими листьями.",
        "Напомни мне, пожалуйста, позвонить зубному врачу до конца этой недели.",
        "В новой библиотеке больше книг, чем я смог бы прочитать за всю свою жизнь.",
        "Он покрасил забор в белый цвет, потому что соседи жаловались на старую краску.",
        "Большинство студентов предпочитают сдавать экзамен утром, а не после обеда.",
        "В ресторане за углом готовят самую вкусную рыбную похлёбку во всём городе.",
        "Наш рейс задержали на три часа из-за густого тумана в аэропорту.",
        "Обычно я читаю газету, пока жду, когда закипит вода в чайнике.",
        "Фермер сказал нам, что яблоки можно будет собирать уже в следующем месяце.",
        "После рождения второго ребёнка они решили переехать жить в деревню.",
        "Никто не знал, почему старые часы на башне остановились ровно в полночь.",
        "Пожалуйста, проверь, что все окна закрыты, прежде чем уходить из дома.",
        "Футбольный матч отменили, потому что поле было полностью затоплено водой.",
        "Его сестра работает медсестрой в большой больнице на другом конце города.",
        "Мы гуляли вдоль реки, пока солнце не скрылось за высокими холмами.",
    ],
}
EDGES = ["", " ", "123 456", "HELLO THERE, HOW ARE YOU TODAY?", "!!!", "x" * 300, "ok", "Это дом."]


@pytest.mark.parametrize("language", ["en", "de", "fr", "ru"])
def test_language_id_keeps_twenty_sentences_of_each_language_and_drops_the_others(language):
    mine = L.language_id(pa.array(SENTENCES[language]), language=language)
    assert mine.keep.all() and mine.detail == [None] * 20
    assert (mine.value > 0.5).all()  # py3langid 0.4 tempers confidences by 1/√bytes: the least here is 0.56 (a ru line)
    others = [s for lang, lines in SENTENCES.items() if lang != language for s in lines]
    theirs = L.language_id(pa.array(others), language=language)
    assert not theirs.keep.any() and (theirs.value == 0).all()  # another language detected: score 0
    assert [d.split("=")[1].split(":")[0] for d in theirs.detail] == [
        lang for lang in SENTENCES if lang != language for _ in range(20)
    ]


def test_language_id_hand_cases_on_the_german_side():
    column = pa.array(
        [
            "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
            "Мальчик играет в парке с собакой.",  # a Cyrillic line on the German side
            "A man rides his bicycle through the old town.",  # an English one
            "",  # not classified: scores 1.0 (OpusFilter: "prevent filtering empty lines")
            None,  # a null counts as empty
            "12:30",  # no byte n-gram of the model in it: uniform, the first class (sr) at 2/142 (sr and srl: one label)
        ]
    )
    got = L.language_id(column, language="de")
    assert got.keep.tolist() == [True, False, False, True, True, False]
    assert got.value.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # German at 0.9999..., rounded to 2 decimals: 1.0
    assert got.detail == [None, "language_id=ru:0.92", "language_id=en:0.99", None, None, "language_id=sr:0.01"]
    strict = L.language_id(column, language="de", threshold=1.0)  # kept iff score > threshold: 1.0 is not
    assert strict.keep.tolist() == [False] * 6
    assert strict.detail[0] == "language_id=de:1" and strict.detail[3] == "language_id=-:1"


def test_language_id_restricted_languages_and_both_sides():
    src = pa.array(["A man rides his bicycle through the old town.", "Мальчик играет в парке с собакой.", "12:30"])
    tgt = pa.array(["Ein Mann fährt mit seinem Fahrrad durch die Altstadt.", "Ein Mann.", "Hello there, my friend."])
    two = L.language_id(src, language="en", langid_languages=["de", "en"])  # py3langid's set_languages
    assert two.keep.tolist() == [True, True, False]  # the Russian line, made to choose between de and en: en at 0.51
    assert two.value[1] == 0.51 and two.detail[2] == "language_id=de:0.5"  # featureless: uniform, the first class
    pair = L.both_sides(L.language_id(src, language="en"), L.language_id(tgt, language="de"))
    assert pair.keep.tolist() == [True, False, False]
    assert pair.value.shape == (3, 2) and pair.value[0].tolist() == [0.99, 1.0]
    assert pair.detail == [None, "src:language_id=ru:0.92", "src:language_id=sr:0.01 tgt:language_id=en:0.7"]
    with pytest.raises(ConfError, match="parameter language: expected .* found 'xx'"):
        L.language_id(src, language="xx")
    with pytest.raises(ConfError, match="py3langid does not know qq"):
        L.language_id(src, language="en", langid_languages=["en", "qq"])
    with pytest.raises(ConfError, match="parameter identifier"):
        L.language_id(src, language="en", identifier="cld2")


def test_langid_classify_is_py3langid_classify_row_by_row(monkeypatch):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    reference = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    texts = [s for lines in SENTENCES.values() for s in lines] + EDGES
    found, confidence = L.langid_classify(texts, languages=None)
    expected = [reference.classify(t) for t in texts]
    assert found == [lang for lang, _ in expected]
    # the same float32 arithmetic in another order (one sparse product instead of one per row): within 1e-5
    np.testing.assert_allclose(confidence, [c for _, c in expected], atol=1e-5, rtol=0)
    # featureless ("", " ", "!!!", "ok"): the first class, sr; digits and "x" * 300: zxx; upper case lowered first
    assert found[-8:] == ["sr", "sr", "zxx", "en", "sr", "zxx", "sr", "ru"]
    monkeypatch.setattr(L, "CHUNK_BYTES", 150)  # a few rows per walk (the 300-byte row alone): the same numbers
    chunked = L.langid_classify(texts)
    assert chunked[0] == found and np.array_equal(chunked[1], confidence)


def test_language_id_with_lingua():
    pytest.importorskip("lingua", reason="lingua-language-detector is not installed (pip install -e '.[lingua]')")
    column = pa.array(
        [
            SENTENCES["de"][0],
            "Мальчик играет в парке с собакой.",
            "A man rides his bicycle through the old town.",
            "",
            "123 456",  # lingua finds no language: every confidence 0
        ]
    )
    got = L.language_id(column, language="de", identifier="lingua")
    assert got.keep.tolist() == [True, False, False, True, False]
    assert got.value[0] > 0.99 and got.value[1:].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert got.detail[1:] == ["language_id=ru:1", "language_id=en:1", None, "language_id=-:0"]
    high = L.language_id(column[:3], language="de", identifier="lingua", lingua_mode="high", langid_languages=["de", "en", "ru"])
    assert high.keep.tolist() == [True, False, False]


def mixed_pairs() -> list[tuple[str, str]]:
    """50 en-de pairs: right languages, swapped, another language on a side, short, empty, digits, uppercase."""
    en, de, fr, ru = (SENTENCES[k] for k in ("en", "de", "fr", "ru"))
    pairs = list(zip(en[:12], de[:12], strict=True))
    pairs += list(zip(de[12:18], en[12:18], strict=True))  # swapped sides
    pairs += list(zip(fr[:6], de[:6], strict=True)) + list(zip(en[:6], ru[:6], strict=True))
    pairs += [("", ""), ("Yes.", "Ja."), ("OK", "OK"), ("Page 12 of 40", "Seite 12 von 40"), ("12:30", "12:30")]
    pairs += [("HELLO THERE, HOW ARE YOU?", "HALLO, WIE GEHT ES DIR?"), ("Thanks!", "Danke!"), ("Berlin", "Berlin")]
    pairs += [("The cat.", "Die Katze."), ("A dog runs.", "Ein Hund rennt."), ("Это дом.", "Das ist ein Haus.")]
    pairs += [(en[19], ""), ("", de[19]), ("x" * 60, "y" * 60), ("Hello world", "Hallo Welt")]
    pairs += list(zip(en[6:9], fr[6:9], strict=True)) + list(zip(ru[6:8], de[6:8], strict=True))
    return pairs


@pytest.mark.parametrize("restrict", [None, ["de", "en", "fr", "ru"]])
def test_language_id_same_decisions_and_scores_as_opusfilter(monkeypatch, restrict):
    pytest.importorskip("opusfilter", reason="OpusFilter is not installed (the `bench` extra)")
    from opusfilter.filters import LanguageIDFilter
    from py3langid.langid import LanguageIdentifier

    # OpusFilter 3.3.1 loads the model with from_pickled_model, which py3langid 0.4 renamed from_model_file
    monkeypatch.setattr(LanguageIdentifier, "from_pickled_model", LanguageIdentifier.from_model_file, raising=False)
    opus = LanguageIDFilter(languages=["en", "de"], id_method="langid", langid_languages=restrict)
    pairs = mixed_pairs()
    scores = np.array(list(opus.score(pairs)))
    accepted = [opus.accept(s) for s in scores]
    src, tgt = (pa.array([p[i] for p in pairs]) for i in (0, 1))
    ours = L.both_sides(
        L.language_id(src, language="en", langid_languages=restrict), L.language_id(tgt, language="de", langid_languages=restrict)
    )
    assert ours.keep.tolist() == accepted
    assert len(pairs) == 50 and 10 < sum(accepted) < 40  # both kinds
    # the confidences agree within 1e-5 before OpusFilter's round(conf, 2), so a score can differ by one step of 0.01
    # only where a confidence lies within 1e-5 of a rounding boundary (none does here: all 100 are equal)
    np.testing.assert_allclose(ours.value, scores, atol=0.01, rtol=0)
