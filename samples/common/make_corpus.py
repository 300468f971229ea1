"""Regenerate ``corpus.txt``: varied, plain English prose built from templates.

The samples only read the checked-in ``corpus.txt``; this script documents where it came
from and lets it be rebuilt deterministically::

    python samples/common/make_corpus.py > samples/common/corpus.txt
"""

from __future__ import annotations

import random

PEOPLE = [
    "the engineer", "a tired operator", "the night nurse", "my grandmother", "the mayor",
    "a young violinist", "the harbour master", "an old fisherman", "the librarian",
    "a quiet student", "the baker on the corner", "our neighbour", "the station guard",
    "a travelling salesman", "the gardener", "the new teacher", "a curious child",
    "the ship's cook", "the surveyor", "a retired pilot", "the shopkeeper", "my brother",
    "the clockmaker", "a stranger in a grey coat", "the village doctor", "the postman",
]
NAMES = [
    "Alice", "Tomas", "Marguerite", "Henrik", "Priya", "Oluwaseun", "Beatrice", "Yusuf",
    "Clara", "Dmitri", "Esther", "Felix", "Greta", "Hugo", "Ingrid", "Jonah", "Kenji",
    "Lucia", "Mateo", "Nadia", "Oscar", "Paulina", "Rafael", "Sofia", "Theo", "Vera",
]
VERBS_PAST = [
    "carried", "repaired", "painted", "measured", "counted", "opened", "closed", "forgot",
    "remembered", "followed", "watched", "collected", "borrowed", "returned", "polished",
    "described", "questioned", "folded", "weighed", "tested", "wrapped", "studied",
    "sharpened", "delivered", "abandoned", "rebuilt", "discovered", "misplaced", "copied",
    "translated", "balanced", "gathered", "scattered", "unlocked", "examined", "inspected",
]
VERBS_PRESENT = [
    "walks", "waits", "listens", "writes", "sings", "argues", "works", "reads", "wanders",
    "complains", "hesitates", "laughs", "travels", "whistles", "sleeps", "cooks", "rests",
]
THINGS = [
    "the brass lantern", "a stack of letters", "the broken clock", "an old map",
    "the kitchen table", "a basket of apples", "the wooden boat", "a box of nails",
    "the heavy ledger", "a pair of boots", "the radio", "a jar of honey", "the blue bicycle",
    "a roll of canvas", "the iron gate", "a small telescope", "the violin case",
    "a bundle of firewood", "the garden hose", "a cracked mirror", "the railway timetable",
    "a loaf of bread", "the leather satchel", "a bag of flour", "the silver kettle",
    "a set of keys", "the weather vane", "a crate of oranges", "the piano", "a paper kite",
]
ADJECTIVES = [
    "quiet", "narrow", "crowded", "empty", "ancient", "cheerful", "muddy", "bright",
    "windy", "cold", "warm", "forgotten", "crooked", "famous", "dusty", "peaceful",
    "noisy", "golden", "humble", "enormous", "tiny", "elegant", "stubborn", "patient",
    "careful", "restless", "gentle", "remarkable", "ordinary", "strange",
]
PLACES = [
    "the market square", "the harbour", "the old mill", "the railway station", "the library",
    "the hill above the town", "the river bank", "the bakery", "the lighthouse",
    "the north road", "the orchard", "the workshop", "the cathedral steps", "the valley",
    "the bridge", "the school yard", "the fish market", "the village hall", "the forest edge",
    "the lower field", "the museum", "the post office", "the ferry landing", "the quarry",
]
TIMES = [
    "at dawn", "before breakfast", "in the afternoon", "late at night", "on Sunday",
    "after the storm", "during the winter", "in early spring", "at half past nine",
    "every Tuesday", "before the market opened", "when the bells rang", "in 1987",
    "on the third of May", "after supper", "just before noon", "at the end of the summer",
]
ADVERBS = [
    "slowly", "carefully", "quickly", "quietly", "proudly", "nervously", "happily",
    "patiently", "suddenly", "gently", "reluctantly", "eagerly", "silently", "boldly",
]
WEATHER = [
    "The rain had not stopped for three days", "A thin fog covered the fields",
    "The wind came in from the sea", "Snow fell softly on the roofs",
    "The sun was low and orange", "Clouds gathered over the hills",
    "It was the hottest day of the year", "The air smelled of salt and smoke",
]
FEELINGS = [
    "hopeful", "uneasy", "proud", "lonely", "relieved", "curious", "grateful", "anxious",
    "content", "puzzled", "determined", "homesick",
]
CONNECTORS = ["because", "although", "while", "until", "since", "after", "before", "so"]
QUOTES = [
    "We will need more light", "Nobody told me it was broken", "Try again tomorrow",
    "It is later than you think", "Leave it by the door", "Who left the gate open?",
    "The numbers do not add up", "Bring the map, please", "That is not what I meant",
    "Everything changes in the spring", "Keep the receipts", "Is the ferry on time?",
]
TOPICS = [
    "the price of bread", "the new bridge", "the harvest", "the election", "the old railway",
    "the missing cat", "the village fair", "the flood of last year", "the school play",
    "the cost of repairs", "the lighthouse keeper's diary", "the broken water pump",
]


OPENING = [
    "The town sat at the mouth of a slow river, where the water turned brown before "
    "it met the sea.",
    "Most mornings began the same way: the baker lit his ovens, the gulls argued over the quay,",
    "and the first ferry sounded its horn twice, as if it were not quite sure it wanted to leave.",
    "Nobody remembered who had built the lighthouse, but everyone had an opinion about its colour.",
    "In winter the streets emptied early; in summer they filled with visitors carrying maps,",
    "cameras, umbrellas, and the slightly worried expression of people who have lost a hotel.",
    "The library kept its windows open whenever it could, which was bad for the "
    "books and good for the librarian.",
    "Children learned to swim in the harbour, to count in the market, and to whistle "
    "from the fishermen.",
    "Every few years someone proposed a new bridge, and every few years the proposal "
    "was politely forgotten.",
    "The clockmaker's shop had forty-one clocks, and not one of them agreed with the church bell.",
    "Prices were written in chalk, corrected in pencil, and argued about in whispers.",
    "When the storm of 1987 flooded the lower field, the whole village carried "
    "sandbags until midnight.",
    "Even now, older residents measure time in two parts: before the flood, and after it.",
    "The railway arrived late, left early, and was loved mostly for its timetable, "
    "which read like poetry.",
    "A visitor once asked what people did for fun; the answer, after a long pause, "
    "was \"we talk\".",
    "That answer was true, though incomplete: they also walked, cooked, sang, mended "
    "nets, and kept bees.",
]


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def sentence(r: random.Random) -> str:
    kind = r.randrange(12)
    if kind == 0:
        return (f"{cap(r.choice(PEOPLE))} {r.choice(VERBS_PAST)} {r.choice(THINGS)} "
                f"{r.choice(TIMES)}.")
    if kind == 1:
        return (f"{r.choice(NAMES)} {r.choice(ADVERBS)} {r.choice(VERBS_PAST)} "
                f"{r.choice(THINGS)} near {r.choice(PLACES)}, {r.choice(CONNECTORS)} "
                f"{r.choice(PEOPLE)} {r.choice(VERBS_PRESENT)} there.")
    if kind == 2:
        return f"{r.choice(WEATHER)}, and {r.choice(PLACES)} was {r.choice(ADJECTIVES)}."
    if kind == 3:
        return (f"\"{r.choice(QUOTES)}\", said {r.choice(NAMES)}, and "
                f"{r.choice(PEOPLE)} {r.choice(ADVERBS)} agreed.")
    if kind == 4:
        n = r.randrange(2, 40)
        return (f"There were {n} {r.choice(['people', 'boats', 'chairs', 'lamps', 'sheep'])} "
                f"in {r.choice(PLACES)} {r.choice(TIMES)}; nobody could explain why.")
    if kind == 5:
        return (f"{r.choice(NAMES)} felt {r.choice(FEELINGS)} {r.choice(CONNECTORS)} "
                f"{r.choice(PEOPLE)} had {r.choice(VERBS_PAST)} {r.choice(THINGS)}.")
    if kind == 6:
        return (f"In {r.choice(PLACES)}, everyone talked about {r.choice(TOPICS)} "
                f"(and, of course, about {r.choice(TOPICS)}).")
    if kind == 7:
        return (f"{cap(r.choice(PEOPLE))} {r.choice(VERBS_PRESENT)} {r.choice(ADVERBS)} "
                f"in {r.choice(PLACES)} {r.choice(TIMES)}.")
    if kind == 8:
        return (f"The {r.choice(ADJECTIVES)} {r.choice(['house', 'street', 'garden', 'room'])} "
                f"belonged to {r.choice(NAMES)}'s family for {r.randrange(3, 120)} years.")
    if kind == 9:
        return (f"Was it {r.choice(ADJECTIVES)}, or merely {r.choice(ADJECTIVES)}? "
                f"{r.choice(NAMES)} could not decide.")
    if kind == 10:
        return (f"{r.choice(NAMES)} and {r.choice(NAMES)} {r.choice(VERBS_PAST)} "
                f"{r.choice(THINGS)} - a {r.choice(ADJECTIVES)} job that took "
                f"{r.randrange(2, 9)} hours.")
    return (f"By {r.randrange(1, 12)} o'clock, {r.choice(PEOPLE)} had {r.choice(VERBS_PAST)} "
            f"{r.choice(THINGS)} and {r.choice(VERBS_PAST)} {r.choice(THINGS)}.")


def main(lines: int = 420, seed: int = 1234) -> None:
    r = random.Random(seed)
    for line in OPENING:
        print(line)
    for _ in range(lines):
        print(" ".join(sentence(r) for _ in range(r.randrange(1, 4))))


if __name__ == "__main__":
    main()
