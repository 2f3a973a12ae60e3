"""A user's own data for the fine-tuning tests: a CSV of sentences (quoted commas, a line break
inside a field, doubled quotes, a BOM, CRLF line ends, string labels), a sentence-pair JSONL and
a regression JSONL, each with the task file that describes it; the README's task file is the
CSV's."""

from __future__ import annotations

import csv
import io
import json
import os
import re

import numpy as np
from helpers_finetune import tiny_encoder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_HEADING = "## Fine-tuning on your own data"
WORDS = "the a good bad movie film great awful fun boring plot is cat dog . , sat on mat".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TINY = {
    **tiny_encoder(64),
    "vocab_size": len(VOCAB),
    "max_seq_length": 16,
    "train_batch_size": 8,
    "eval_batch_size": 8,
    "learning_rate": 3e-3,
    "num_train_epochs": 1,
    "init_checkpoint": None,
}


def readme_task_file() -> dict:
    """The task file the README shows (its first ```json block after the heading)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert README_HEADING in text, f"README.md lacks {README_HEADING!r}"
    match = re.search(r"```json\n(.*?)```", text.split(README_HEADING, 1)[1], re.DOTALL)
    assert match, f"no ```json block after {README_HEADING!r}"
    return json.loads(match.group(1))


def csv_text(rows: list[list[str]]) -> str:
    """`rows` as a spreadsheet writes them: a BOM, CRLF, quotes where a field needs them."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows(rows)
    return "\ufeff" + buffer.getvalue()


def next_line(text: str) -> int:
    """The line a record appended to `text` (which ends with a line break) starts on."""
    return text.count("\n") + 1


def review_rows(n: int, seed: int) -> list[list[str]]:
    """`n` (sentence, label) rows whose label follows the words; every third sentence has a
    comma, every fourth a line break, every fifth doubled quotes."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        good = bool(rng.integers(0, 2))
        word = rng.choice(["good", "great", "fun"] if good else ["bad", "awful", "boring"])
        sentence = f"the {word} movie"
        if i % 3 == 0:
            sentence += ", a cat"
        if i % 4 == 0:
            sentence += "\nthe plot"
        if i % 5 == 0:
            sentence = f'the "{word}" film'
        rows.append([sentence, "positive" if good else "negative"])
    return rows


def pair_rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        same = bool(rng.integers(0, 2))
        animal = rng.choice(["cat", "dog"])
        other = animal if same else ("dog" if animal == "cat" else "cat")
        rows.append(
            {
                "premise": f"the {animal} sat on the mat .",
                "hypothesis": f"a {other} sat",
                "label": "entailment" if same else "contradiction",
            }
        )
    return rows


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_user_data(root) -> dict[str, str]:
    """The three tasks' files under `root` (a pathlib.Path); their task files by name."""
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    reviews = root / "reviews"
    reviews.mkdir()
    header = [["sentence", "label"]]
    (reviews / "train.csv").write_text(csv_text(header + review_rows(24, 0)), encoding="utf-8")
    (reviews / "dev.csv").write_text(csv_text(header + review_rows(8, 1)), encoding="utf-8")
    test = [["sentence"], ["the good, fun movie"], ["the awful\nboring plot"], ["a bad film"]]
    (reviews / "test.csv").write_text(csv_text(test), encoding="utf-8")
    (reviews / "reviews.json").write_text(json.dumps(readme_task_file()), encoding="utf-8")
    pairs = root / "pairs"
    pairs.mkdir()
    write_jsonl(pairs / "train.jsonl", pair_rows(16, 2))
    write_jsonl(pairs / "dev.jsonl", pair_rows(8, 3))
    write_jsonl(pairs / "test.jsonl", [{"premise": "the cat sat .", "hypothesis": "a dog sat"}])
    pair_task = {
        "name": "pairs", "kind": "classification", "train": "train.jsonl", "dev": "dev.jsonl",
        "test": "test.jsonl", "text": "premise", "text_pair": "hypothesis",
    }  # fmt: skip
    (pairs / "pairs.json").write_text(json.dumps(pair_task), encoding="utf-8")
    scores = root / "finetuning_data" / "scores"  # found by `--tasks scores`
    scores.mkdir(parents=True)
    rng = np.random.default_rng(4)
    for split, n in (("train", 16), ("dev", 8)):
        rows = [{"text": f"the {w} film", "score": float(rng.uniform(1, 5))} for w in WORDS[:n]]
        write_jsonl(scores / f"{split}.jsonl", rows)
    score_task = {
        "kind": "regression",
        "train": "train.jsonl",
        "dev": "dev.jsonl",
        "label": "score",
    }
    (scores / "task.json").write_text(json.dumps(score_task), encoding="utf-8")
    return {
        "reviews": str(reviews / "reviews.json"),
        "pairs": str(pairs / "pairs.json"),
        "scores": str(scores / "task.json"),
    }


def listing(root) -> list[str]:
    """Every path under `root` with its size: what a refused run must leave unchanged."""
    return sorted(
        f"{p.relative_to(root)} {p.stat().st_size if p.is_file() else 'dir'}"
        for p in root.rglob("*")
    )
