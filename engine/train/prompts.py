"""Our own prompt set for drafter training: templates x topics x numbers, deterministic from a seed.

Size: over 500 lines, most of them the templates and topic lists themselves (data, not logic).

Everything here was written for this project (no benchmark items): Python tasks, arithmetic and word
problems with varied numbers, explanations, lists, emails, comparisons, stories, how-tos, rewrites,
conversions, function stubs to complete or edit, longer writing, role play, and texts to extract from.
`build_prompts(n, seed, families)` returns n distinct prompts; the space holds far more than 6000.
"""
from __future__ import annotations

import json
import random

from ..paths import PROMPTS

NAMES = ["Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gabe", "Hana", "Ivan", "Jade", "Kofi", "Lena",
         "Milo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wes", "Yuki", "Zoe"]
ITEMS = ["apples", "stickers", "marbles", "books", "pencils", "cookies", "stamps", "shells", "cards",
         "balloons", "coins", "eggs", "oranges", "toy cars", "seeds", "beads", "cupcakes", "postcards"]
LANGS = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]

# --- code -----------------------------------------------------------------------------------------
PY_TASKS = [
    "checks whether a string is a palindrome, ignoring case and spaces",
    "returns the n-th Fibonacci number using iteration",
    "counts how many vowels a string contains",
    "merges two sorted lists into one sorted list",
    "removes duplicates from a list while keeping the original order",
    "converts a temperature from Celsius to Fahrenheit",
    "returns the largest and smallest number in a list",
    "reverses the order of words in a sentence",
    "checks whether a number is prime",
    "returns the factorial of a non-negative integer",
    "flattens a nested list of arbitrary depth",
    "counts the frequency of each word in a text and returns a dictionary",
    "returns the second largest distinct value in a list",
    "checks whether two strings are anagrams of each other",
    "computes the greatest common divisor of two integers",
    "converts a Roman numeral to an integer",
    "converts an integer to its binary representation without using bin()",
    "splits a list into chunks of a given size",
    "rotates a list to the right by k positions",
    "finds the longest common prefix of a list of strings",
    "returns all pairs of numbers in a list that add up to a target value",
    "validates that a string of brackets is balanced",
    "computes the running average of a list of numbers",
    "capitalizes the first letter of every word in a string",
    "reads a CSV file and returns the sum of one column",
    "finds the most common element in a list",
    "transposes a matrix given as a list of lists",
    "returns the digits of an integer as a list",
    "checks whether a year is a leap year",
    "computes the median of a list of numbers",
    "removes all punctuation from a string",
    "groups a list of words by their first letter",
    "computes the dot product of two vectors",
    "counts the number of lines, words and characters in a text file",
    "returns the indices of all occurrences of a value in a list",
    "implements binary search on a sorted list",
    "generates all subsets of a small list",
    "converts a dictionary's keys to lowercase",
    "sorts a list of tuples by their second element",
    "compresses a string using run-length encoding",
    "decodes a run-length encoded string",
    "checks whether a list is sorted in non-decreasing order",
    "returns the sum of the squares of the odd numbers in a list",
    "finds the first non-repeating character in a string",
    "computes compound interest for a principal, rate and number of years",
    "converts seconds into hours, minutes and seconds",
    "masks all but the last four characters of a credit card number",
    "computes the Levenshtein distance between two strings",
    "merges two dictionaries, summing the values of shared keys",
    "returns the n most frequent words in a text",
    "checks whether a string is a valid IPv4 address",
    "finds the missing number in a list containing 1 to n with one number absent",
    "implements a simple stack class with push, pop and peek",
    "implements a queue using two stacks",
    "returns a list of prime numbers up to n using the sieve of Eratosthenes",
    "shuffles a list in place using the Fisher-Yates algorithm",
    "converts a snake_case string to camelCase",
    "computes the area of a polygon from its vertices",
    "checks whether a number is a perfect square",
    "returns the length of the longest increasing run in a list",
]
PY_STYLES = ["Write a Python function that {t}.", "Write a Python function that {t}. Include a docstring.",
             "Implement a function in Python that {t}, and show an example call.",
             "Can you write Python code that {t}?", "Write a short Python function that {t}. Add type hints.",
             "Show me a Python solution: a function that {t}.",
             "Write a Python function that {t}, then explain how it works."]
PY_HOWTO = ["read a JSON file", "sort a dictionary by its values", "reverse a string", "remove an item from a list",
            "check if a key exists in a dictionary", "get the current date and time", "write text to a file",
            "iterate over two lists at the same time", "convert a string to an integer safely",
            "measure how long a piece of code takes", "make an HTTP request", "create a virtual environment",
            "read command line arguments", "copy a file", "list all files in a folder", "use a list comprehension",
            "handle exceptions", "format a float with two decimal places", "join a list of strings",
            "find the length of a list", "use a lambda function with sorted", "split a string by commas",
            "remove whitespace from a string", "create a class with a constructor", "use enumerate in a loop",
            "generate random numbers", "round a number", "use f-strings", "define default arguments",
            "work with sets", "count items with collections.Counter", "use a dataclass"]
PY_SNIPPETS = [
    "def f(xs):\n    return [x * 2 for x in xs if x % 2 == 0]",
    "def g(s):\n    return s[::-1] == s",
    "def h(n):\n    total = 0\n    for i in range(1, n + 1):\n        total += i * i\n    return total",
    "def k(d):\n    return {v: k for k, v in d.items()}",
    "def m(words):\n    return max(words, key=len)",
    "def p(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
    "def q(xs):\n    seen = set()\n    return [x for x in xs if not (x in seen or seen.add(x))]",
    "def r(text):\n    return sum(1 for c in text if c.isupper())",
    "def s(n):\n    return [i for i in range(2, n) if all(i % j for j in range(2, i))]",
    "def t(xs):\n    return sorted(xs, key=lambda x: (-x[1], x[0]))",
]
PY_BUGGY = [
    ("def average(xs):\n    return sum(xs) / len(xs) + 1", "it should return the plain average"),
    ("def last(xs):\n    return xs[len(xs)]", "it raises an IndexError"),
    ("def count_a(s):\n    n = 0\n    for c in s:\n        if c == 'a':\n            n = 1\n    return n", "it always returns 0 or 1"),
    ("def is_even(n):\n    return n % 2 == 1", "it returns the wrong answer"),
    ("def add_item(item, bag=[]):\n    bag.append(item)\n    return bag", "items from earlier calls keep showing up"),
    ("def square_all(xs):\n    for x in xs:\n        x = x * x\n    return xs", "the list is not changed"),
    ("def greet(name):\n    print('Hello, ' + name)\n    return", "the caller gets None instead of the greeting"),
]
CLASSES = ["a bank account with deposit and withdraw methods", "a to-do list", "a simple inventory of products",
           "a rectangle with area and perimeter methods", "a student with grades and an average method",
           "a library that lends books", "a temperature sensor that keeps its last ten readings",
           "a shopping cart that computes a total with tax", "a timer that can start, stop and reset",
           "a playlist of songs"]


CODE_EXTRAS = ["", "", "", " Use a for loop.", " Do not use any imports.", " Write it recursively if that is natural.",
               " Also write two simple test cases.", " Keep it short.", " Handle the empty input case.",
               " Explain the time complexity.", " Use descriptive variable names.", " Make it efficient."]
PY_PARAM = ["returns the sum of all multiples of {a} or {b} below {n}", "prints the multiplication table of {a} up to {b}",
            "returns every {a}-th element of a list", "checks whether a number is divisible by both {a} and {b}",
            "returns the first {a} square numbers", "pads a string with '*' to a width of {n}",
            "returns True if a list has more than {a} distinct elements", "repeats each character of a string {a} times",
            "converts a list of {a}-digit strings to integers and sums them", "splits a string into pieces of length {a}"]


def _code(r: random.Random) -> str:
    kind = r.random()
    if kind < 0.15:
        t = r.choice(PY_PARAM).format(a=r.randint(2, 9), b=r.randint(2, 12), n=r.randint(10, 1000))
        return r.choice(PY_STYLES).format(t=t) + r.choice(CODE_EXTRAS)
    if kind < 0.55:
        return r.choice(PY_STYLES).format(t=r.choice(PY_TASKS)) + r.choice(CODE_EXTRAS)
    if kind < 0.7:
        return r.choice(["How do I {h} in Python?", "What is the best way to {h} in Python?",
                         "Show me how to {h} in Python with a short example."]).format(h=r.choice(PY_HOWTO))
    if kind < 0.8:
        return r.choice(["Explain what this Python code does:\n\n{c}", "What does this function return?\n\n{c}",
                         "Add comments to this Python code:\n\n{c}"]).format(c=r.choice(PY_SNIPPETS))
    if kind < 0.9:
        code, symptom = r.choice(PY_BUGGY)
        return f"This Python function has a bug: {symptom}. Fix it.\n\n{code}"
    return r.choice(["Write a Python class for {c}.", "Design a small Python class that models {c}."]).format(
        c=r.choice(CLASSES))


# --- maths ----------------------------------------------------------------------------------------
def _arith(r: random.Random) -> str:
    a, b = r.randint(2, 999), r.randint(2, 999)
    kind = r.randrange(9)
    if kind == 0:
        op = r.choice(["+", "-", "*"])
        return r.choice(["What is {a} {op} {b}?", "Calculate {a} {op} {b}.", "Compute {a} {op} {b} step by step."]
                        ).format(a=a, b=b, op=op)
    if kind == 1:
        return f"What is {r.choice([5, 10, 12, 15, 20, 25, 30, 40, 75])}% of {r.randrange(20, 2000, 10)}?"
    if kind == 2:
        g = r.randint(2, 12)
        return f"Simplify the fraction {g * r.randint(2, 30)}/{g * r.randint(2, 30)}."
    if kind == 3:
        return f"What is {a * r.randint(2, 25)} divided by {a}?"
    if kind == 4:
        x, c = r.randint(1, 30), r.randint(2, 12)
        return f"Solve for x: {c}x + {a} = {c * x + a}."
    if kind == 5:
        return f"What is the square of {r.randint(11, 99)}?"
    if kind == 6:
        nums = [r.randint(1, 100) for _ in range(r.randint(4, 7))]
        return r.choice(["What is the average of {n}?", "Find the median of {n}.", "What is the sum of {n}?"]
                        ).format(n=", ".join(map(str, nums)))
    if kind == 7:
        return f"List all the divisors of {r.randint(20, 500)}."
    return f"Round {r.randint(1, 9999)}.{r.randint(10, 99)} to the nearest {r.choice(['ten', 'hundred', 'whole number'])}."


def _word_problem(r: random.Random) -> str:
    n1, n2 = r.sample(NAMES, 2)
    it = r.choice(ITEMS)
    a, b, c = r.randint(5, 60), r.randint(2, 40), r.randint(1, 20)
    templates = [
        f"{n1} has {a} {it}. {n1} buys {b} more and gives {c} to {n2}. How many {it} does {n1} have now?",
        f"{n1} packs {a * c} {it} into bags of {c}. How many bags does {n1} fill?",
        f"A shop sells {it} at ${b} each. {n1} buys {c} of them and pays with a ${b * c + r.randint(1, 50)} bill. "
        f"How much change does {n1} get?",
        f"{n1} reads {b} pages a day. The book has {b * a + c} pages. How many days does it take to finish it?",
        f"A train travels {a * 10} km in {c % 5 + 2} hours. What is its average speed?",
        f"{n1} is {a} years old and {n2} is {c} years younger. How old will {n2} be in {b} years?",
        f"A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter?",
        f"{n1} saves ${b} every week. How many weeks does {n1} need to save ${b * a}?",
        f"There are {a} students in a class and {c} of them are absent. What fraction of the class is present?",
        f"{n1} and {n2} share {a * 2} {it} so that {n1} gets {c} more than {n2}. How many does each get?",
        f"A car uses {c % 8 + 4} liters of fuel per 100 km. How much fuel does it need for a {a * 10} km trip?",
        f"A tank holds {a * 20} liters and fills at {b} liters per minute. How long does it take to fill?",
        f"{n1} walks {c % 6 + 2} km each morning and {b % 5 + 1} km each evening. How far does {n1} walk in {a % 14 + 1} days?",
        f"A jacket costs ${a * 5}. It is on sale for {r.choice([10, 20, 25, 30, 40, 50])}% off. What is the sale price?",
        f"{n1} scored {a}, {b + 50}, and {c + 60} on three tests. What score is needed on the fourth test "
        f"to average {r.randint(60, 90)}?",
    ]
    return r.choice(templates)


UNITS = [("kilometers", "miles"), ("miles", "kilometers"), ("pounds", "kilograms"), ("kilograms", "pounds"),
         ("liters", "gallons"), ("inches", "centimeters"), ("feet", "meters"), ("hours", "minutes"),
         ("days", "hours"), ("grams", "ounces"), ("meters", "feet")]


def _convert(r: random.Random) -> str:
    u, v = r.choice(UNITS)
    return r.choice(["Convert {n} {u} to {v}.", "How many {v} are in {n} {u}?"]).format(n=r.randint(2, 500), u=u, v=v)


# --- knowledge and writing -------------------------------------------------------------------------
CONCEPTS = ["photosynthesis", "gravity", "inflation", "the water cycle", "machine learning", "blockchain",
            "the immune system", "supply and demand", "climate change", "plate tectonics", "electricity",
            "the greenhouse effect", "compound interest", "natural selection", "black holes", "vaccines",
            "the internet", "recursion", "DNA", "renewable energy", "the moon's phases",
            "how rainbows form", "the human heart", "neural networks", "encryption", "democracy",
            "the scientific method", "tides", "volcanoes", "magnetism", "sound waves", "the speed of light",
            "opportunity cost", "cloud computing", "the French Revolution", "the Renaissance", "antibiotics",
            "sleep cycles", "time zones", "hash tables", "big O notation", "operating systems", "memory in computers",
            "the carbon cycle", "earthquakes", "fermentation", "interest rates", "the circulatory system",
            "entropy", "probability", "prime numbers", "the Pythagorean theorem", "version control",
            "object-oriented programming", "the food chain", "erosion", "the solar system", "batteries",
            "GPS", "compilers", "databases", "the stock exchange", "taxes", "photosynthesis in algae",
            "weather forecasts", "the printing press", "ancient Rome", "the Silk Road", "coral reefs"]
AUDIENCES = ["in simple terms", "to a ten-year-old", "in three sentences", "in one paragraph", "with an example",
             "to a beginner", "briefly", "using an analogy", "step by step", "as if I were a high school student"]
WHY = ["the sky is dark at night", "leaves change color in autumn", "we have seasons", "ice cubes crack in a drink",
       "bread rises", "the ocean is salty", "cats purr", "we need sleep", "metal feels cold", "birds migrate",
       "onions make people cry", "the moon looks bigger near the horizon", "planes can fly", "soap cleans",
       "we yawn", "stars twinkle", "popcorn pops", "the sea has waves", "people get hiccups", "milk turns sour"]


def _explain(r: random.Random) -> str:
    if r.random() < 0.3:
        return r.choice(["Why {w}?", "Can you explain why {w}?", "Explain briefly why {w}."]).format(w=r.choice(WHY))
    c = r.choice(CONCEPTS)
    return r.choice(["Explain {c} {a}.", "What is {c}? Explain {a}.", "Can you explain {c} {a}?",
                     "Describe {c} {a}.", "Give me an overview of {c}, {a}."]).format(c=c, a=r.choice(AUDIENCES))


LIST_THINGS = ["ways to save money", "tips for better sleep", "healthy breakfast ideas", "ways to reduce stress",
               "books every teenager should read", "benefits of regular exercise", "ideas for a rainy day",
               "tips for learning a new language", "ways to be more productive", "fun facts about octopuses",
               "common mistakes new programmers make", "things to pack for a camping trip", "houseplants that are easy to care for",
               "ways to reduce plastic waste", "questions to ask in a job interview", "tips for public speaking",
               "hobbies you can start at home", "ways to organize a small desk", "uses for baking soda",
               "reasons to learn to cook", "board games for families", "tips for writing a good essay",
               "ways to make new friends in a new city", "safety tips for cycling in a city", "famous inventions",
               "ideas for a birthday party", "ways to improve your memory", "benefits of reading",
               "kitchen tools every beginner needs", "tips for keeping a budget", "good habits for programmers",
               "ways to save energy at home", "snacks for a road trip", "ways to help the environment",
               "signs of a healthy lawn", "tips for keeping houseplants alive in winter", "fruits high in vitamin C",
               "ways to practice gratitude", "tips for working from home", "animals that live in the desert"]


def _list(r: random.Random) -> str:
    n = r.choice([3, 4, 5, 6, 7, 8, 10])
    return r.choice(["List {n} {t}.", "Give me {n} {t}.", "What are {n} {t}?", "Name {n} {t}, with a sentence on each.",
                     "Make a numbered list of {n} {t}."]).format(n=n, t=r.choice(LIST_THINGS))


RECIPIENTS = ["my manager", "a colleague", "a landlord", "a teacher", "a customer", "a neighbor", "a friend",
              "the support team of an online shop", "a job recruiter", "my team", "a professor", "a client"]
PURPOSES = ["asking for a day off next Friday", "rescheduling a meeting to next week", "thanking them for their help",
            "reporting a broken heater", "asking for an extension on a deadline", "following up on a job application",
            "inviting them to a small party", "apologizing for a late reply", "requesting a refund for a damaged order",
            "announcing a new project", "asking for feedback on a report", "confirming an appointment on Monday",
            "introducing myself as the new team member", "declining an invitation politely",
            "asking about the status of an order", "sharing the notes from today's meeting"]


def _email(r: random.Random) -> str:
    return r.choice(["Write a short email to {to} {p}.", "Draft a polite email to {to} {p}.",
                     "Write a brief, friendly message to {to} {p}."]).format(to=r.choice(RECIPIENTS), p=r.choice(PURPOSES))


PAIRS = [("cats", "dogs"), ("Python", "Go"), ("tea", "coffee"), ("renting", "buying a home"),
         ("electric cars", "gasoline cars"), ("a laptop", "a desktop computer"), ("running", "swimming"),
         ("books", "movies"), ("city life", "country life"), ("lists", "tuples in Python"), ("TCP", "UDP"),
         ("a lake", "a pond"), ("viruses", "bacteria"), ("stocks", "bonds"), ("email", "instant messaging"),
         ("solar power", "wind power"), ("SQL", "NoSQL databases"), ("trains", "planes for travel"),
         ("a tablet", "a laptop for students"), ("paper books", "e-readers"), ("mitosis", "meiosis"),
         ("a hawk", "an eagle"), ("baking", "frying"), ("RAM", "storage"), ("loops", "recursion"),
         ("public schools", "homeschooling"), ("democracy", "monarchy"), ("the sun", "the moon"),
         ("frogs", "toads"), ("git merge", "git rebase"), ("weight training", "cardio"), ("butter", "margarine")]


def _compare(r: random.Random) -> str:
    a, b = r.choice(PAIRS)
    return r.choice(["Compare {a} and {b}.", "What are the main differences between {a} and {b}?",
                     "What are the pros and cons of {a} versus {b}?", "Which is better, {a} or {b}? Explain briefly.",
                     "Write a short comparison of {a} and {b}."]).format(a=a, b=b)


CHARACTERS = ["a shy robot", "an old fisherman", "a curious cat", "a young wizard", "a lost astronaut", "a talking tree",
              "a baker who cannot taste", "a detective dog", "a girl who can talk to birds", "a retired superhero",
              "a lighthouse keeper", "a clumsy dragon", "a time-traveling student", "a penguin in the desert",
              "a musician who lost her voice", "two rival chefs", "a ghost who loves sunshine", "a tiny knight"]
EVENTS = ["finds a mysterious map", "makes a new friend", "has to save their village", "discovers a secret door",
          "wins an unexpected prize", "gets lost in a big city", "learns to fly", "receives a letter from the future",
          "must solve a riddle to go home", "opens a small shop", "builds a machine that grants wishes",
          "travels to the bottom of the sea", "gets stuck in an elevator", "starts a garden on the roof"]
FORMS = ["short poem", "haiku", "limerick", "four-line rhyme", "short song verse"]
POEM_TOPICS = ["the ocean", "autumn leaves", "a city at night", "friendship", "coffee in the morning", "the first snow",
               "a lazy Sunday", "the stars", "a garden", "learning to code", "the moon", "rain on a window", "home"]


def _story(r: random.Random) -> str:
    if r.random() < 0.3:
        return r.choice(["Write a {f} about {t}.", "Compose a {f} about {t}."]).format(f=r.choice(FORMS), t=r.choice(POEM_TOPICS))
    return r.choice(["Write a short story about {c} who {e}.", "Tell me a bedtime story about {c} who {e}.",
                     "Write a story in under 200 words about {c} who {e}.", "Write the opening paragraph of a story about {c} who {e}."]
                    ).format(c=r.choice(CHARACTERS), e=r.choice(EVENTS))


HOWTOS = ["make a cup of tea", "change a flat tire", "start running as a beginner", "write a resume", "plant tomatoes",
          "make pancakes", "prepare for a job interview", "clean a laptop keyboard", "learn to touch type",
          "set up a budget", "tie a tie", "make a paper airplane", "back up my phone", "boil an egg",
          "train a puppy to sit", "write a cover letter", "study for an exam", "organize a small closet",
          "make a simple website", "cook rice on the stove", "improve my handwriting", "meditate for five minutes",
          "make cold brew coffee", "set up a home aquarium", "write a haiku", "learn to juggle", "start a podcast",
          "fold a fitted sheet", "care for a cactus", "make a smoothie", "choose a good password",
          "start journaling", "bake banana bread", "plan a road trip", "save for a vacation", "give a good presentation"]


def _howto(r: random.Random) -> str:
    return r.choice(["How do I {h}?", "Give step-by-step instructions to {h}.", "What is the easiest way to {h}?",
                     "Explain how to {h} in a few steps.", "I want to {h}. Where should I start?"]).format(h=r.choice(HOWTOS))


SUBJECTS = ["the meeting", "our team", "the new policy", "this product", "the weather", "my neighbor's dog",
            "the train", "the project", "the report", "the restaurant"]
PREDICATES = ["was kind of a mess today", "is gonna be late again", "really needs to be fixed asap",
              "totally blew everyone away", "didn't work like we thought", "is way too expensive",
              "got moved to next week for no reason", "is super noisy at night"]


def _rewrite(r: random.Random) -> str:
    s = f"{r.choice(SUBJECTS).capitalize()} {r.choice(PREDICATES)}."
    kind = r.randrange(3)
    if kind == 0:
        return r.choice(["Rewrite this sentence to sound more formal: \"{s}\"", "Make this sentence more polite: \"{s}\"",
                         "Fix the tone of this sentence for a work email: \"{s}\""]).format(s=s)
    if kind == 1:
        phrase = r.choice(["Good morning, how are you?", "Where is the train station?", "I would like a coffee, please.",
                           "Thank you for your help.", "What time is it?", "The weather is nice today.",
                           "Can you help me?", "I am learning a new language.", "See you tomorrow."])
        return f"Translate \"{phrase}\" into {r.choice(LANGS)}."
    topic = r.choice(CONCEPTS)
    return r.choice(["Write a tweet about {t}.", "Write a one-sentence summary of {t}.",
                     "Write a catchy title for an article about {t}.", "Write a short quiz with three questions about {t}."]
                    ).format(t=topic)


ADVICE = ["learning to program", "moving to a new country", "getting a pet", "starting a small business",
          "going back to school as an adult", "switching careers", "living alone for the first time", "running a marathon",
          "buying a used car", "taking a gap year", "using social media less", "learning an instrument"]


def _advice(r: random.Random) -> str:
    return r.choice(["What are the pros and cons of {a}?", "Give me some advice about {a}.",
                     "What should I know before {a}?", "What are common mistakes people make when {a}?"]).format(a=r.choice(ADVICE))


# --- code to complete or edit (copy-heavy answers: the target repeats the given code) --------------
# (name, parameters, return hint, what it does, example calls with results), all our own.
# Our own function stubs (name, parameters, return type, docstring, doctest examples), one JSON line each
STUBS = [(r["name"], r["args"], r["returns"], r["doc"], [tuple(e) for e in r["examples"]])
         for r in map(json.loads, (PROMPTS / "train-stubs.jsonl").read_text(encoding="utf-8").splitlines())]
STUB_ASKS = ["Complete the following Python function.", "Complete this Python function:", "Finish the function below.",
             "Fill in the body of this Python function.", "Implement the function below in Python.",
             "Write the code for this function:"]


def _stub_code(r: random.Random) -> str:
    name, params, ret, doc, examples = r.choice(STUBS)
    style = r.randrange(3)
    if style == 0:    # doctest examples
        ex = "".join(f"    >>> {call}\n    {out}\n" for call, out in examples)
    elif style == 1:  # prose examples
        ex = "    For example:\n" + "".join(f"    {call} returns {out}\n" for call, out in examples)
    else:             # numbered input / output
        ex = "".join(f"    Example {i + 1}:\n        Input: {call[len(name) + 1:-1]}\n        Output: {out}\n"
                     for i, (call, out) in enumerate(examples))
    hints = r.random() < 0.6
    head = f"def {name}({params}) -> {ret}:" if hints else f"def {name}({', '.join(p.split(':')[0] for p in params.split(', '))}):"
    typing = [t for t in ("List", "Tuple", "Dict", "Optional") if hints and t + "[" in params + ret]
    imports = f"from typing import {', '.join(typing)}\n\n\n" if typing else "\n"
    return f"{imports}{head}\n    \"\"\"{doc}\n\n{ex}    \"\"\"\n"


def _complete(r: random.Random) -> str:
    code = _stub_code(r)
    if r.random() < 0.75:
        return f"{r.choice(STUB_ASKS)}\n```python\n{code}```"
    ask = r.choice(["Add type hints and a docstring to this function:", "Rewrite this function so that it is easier "
                    "to read:", "Write three unit tests for this function:", "Explain this Python code line by line:",
                    "Rename the variables in this code so that their names say what they hold:"])
    return f"{ask}\n\n{r.choice(PY_SNIPPETS)}"


# --- open-ended writing, role play and extraction from a given text --------------------------------
PERSONAS = ["a ship's captain in the 1800s", "a friendly librarian", "a detective solving a small-town mystery",
            "a chef who runs a busy restaurant", "a tour guide in Rome", "a personal fitness coach", "a museum curator",
            "a medieval blacksmith", "a science teacher", "an astronaut on the space station", "a gardener",
            "a startup founder pitching to investors", "a sports commentator", "a travel writer", "a doctor",
            "a wise old owl in a forest", "a customer support agent", "a pirate looking for treasure"]
ROLE_ASKS = ["Describe a typical day in your life.", "What advice would you give to someone just starting out?",
             "Tell me about the hardest moment of your career.", "How would you explain your job to a child?",
             "What do you love most about your work?", "Introduce yourself to a new visitor.",
             "What mistakes do beginners make, and how can they avoid them?"]
WRITE_FORMS = ["travel blog post", "product description", "short speech", "persuasive essay", "newsletter intro",
               "cover letter", "short story opening", "opinion piece", "social media post", "press release"]
WRITE_TOPICS = ["a weekend in Kyoto", "a new reusable water bottle", "the opening of a community garden",
                "why schools should teach cooking", "a local library's summer reading program", "an electric bicycle",
                "a hiking trip in the Alps", "a small bakery's anniversary", "remote work", "a charity fun run",
                "learning a second language", "a new smartphone app for budgeting", "a jazz festival",
                "recycling at the office", "a science fair", "a family holiday by the sea"]
WRITE_HOW = ["highlighting cultural experiences and must-see attractions", "in an enthusiastic tone",
             "for a general audience", "in under 200 words", "with a catchy title", "using vivid details",
             "that ends with a call to action", "in the style of a news report", ""]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Toronto", "Melbourne", "Seoul", "Lima", "Dublin", "Prague", "Denver"]
PRODUCTS = ["solar panels", "office chairs", "laptops", "coffee machines", "bicycles", "tablets", "printers"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def _roleplay(r: random.Random) -> str:
    return r.choice(["Pretend you are {p}. {q}", "Imagine you are {p}. {q}", "Act as {p}. {q}",
                     "You are {p}. {q}"]).format(p=r.choice(PERSONAS), q=r.choice(ROLE_ASKS))


def _writing(r: random.Random) -> str:
    how = r.choice(WRITE_HOW)
    return r.choice(["Compose an engaging {f} about {t}{h}.", "Write a {f} about {t}{h}.",
                     "Draft a {f} for {t}{h}."]).format(f=r.choice(WRITE_FORMS), t=r.choice(WRITE_TOPICS),
                                                      h=", " + how if how else "")


def _passage(r: random.Random) -> str:
    out = []
    for _ in range(r.randint(2, 4)):
        n1, n2 = r.sample(NAMES, 2)
        out.append(r.choice([
            "{a} met {b} in {c} on {m} {d} to sign an order for {q} {p} worth ${v}.",
            "On {m} {d}, {a} shipped {q} {p} from {c} to {b}, who paid ${v}.",
            "{a} from {c} reported that sales of {p} rose to {q} units in {m}, bringing in ${v}.",
            "{b} visited {c} in {m} and bought {q} {p} for ${v} after talking to {a}."]).format(
            a=n1, b=n2, c=r.choice(CITIES), m=r.choice(MONTHS), d=r.randint(1, 28), q=r.randint(2, 500),
            p=r.choice(PRODUCTS), v=r.randint(100, 90000)))
    return " ".join(out)


def _extract(r: random.Random) -> str:
    ask = r.choice(["Extract every person, city and amount of money from the text below and return them as JSON.",
                    "List the names, dates and numbers mentioned in the following text.",
                    "Summarise the text below in one sentence.", "Rewrite the following text in a more formal tone.",
                    "Turn the text below into a table with columns for name, city, product and amount.",
                    "Correct any grammar mistakes in the text below and return the corrected text.",
                    "Translate the following text into simple English for a child."])
    return f"{ask}\n\n{_passage(r)}"


# Generic instructions that multiply the space of the open-ended categories (not the maths ones).
EXTRAS = ["", "", "", "", " Keep it under 100 words.", " Use bullet points.", " Be concise.", " Answer in a friendly tone.",
          " Include an example.", " Use simple words.", " Make it fun.", " Keep it to one paragraph.", " Use a formal tone.",
          " End with a short summary.", " Write it for a busy reader.", " Please be detailed."]


def _extra(fn):
    return lambda r: fn(r) + r.choice(EXTRAS)


# name -> (builder, weight); `--families` trains on a subset (e.g. a code drafter: code,complete).
CATEGORIES = {"code": (_code, 5), "arith": (_arith, 3), "word": (_word_problem, 3), "convert": (_convert, 1),
              "explain": (_extra(_explain), 3), "list": (_extra(_list), 2), "email": (_extra(_email), 2),
              "compare": (_extra(_compare), 2), "story": (_extra(_story), 2), "howto": (_extra(_howto), 2),
              "rewrite": (_rewrite, 2), "advice": (_extra(_advice), 1), "complete": (_complete, 4),
              "roleplay": (_extra(_roleplay), 1), "writing": (_extra(_writing), 2), "extract": (_extract, 2)}


def build_prompts(n: int, seed: int = 0, exclude: set[str] | None = None,
                  families: list[str] | None = None) -> list[str]:
    """n distinct prompts, the same for the same (n, seed, families); prompts in `exclude` are skipped."""
    r = random.Random(seed)
    fns, weights = zip(*(CATEGORIES[f] for f in (families or CATEGORIES)))
    seen: set[str] = set(exclude or ())
    out: list[str] = []
    misses = 0
    while len(out) < n:
        p = r.choices(fns, weights)[0](r)
        if p in seen:
            misses += 1
            if misses > 50 * n + 10000:  # the space is far larger than any n we ask for; guard anyway
                raise ValueError(f"could only build {len(out)} distinct prompts")
            continue
        seen.add(p)
        out.append(p)
    return out


def heldout_prompts(n: int, train: list[str], seed: int = 10_000, families: list[str] | None = None) -> list[str]:
    """n prompts from another seed that are not in the training list (for the trainer's tau proxy)."""
    return build_prompts(n, seed, exclude=set(train), families=families)
