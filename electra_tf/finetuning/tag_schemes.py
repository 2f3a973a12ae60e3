"""Tag schemes of token-tagging data: IOB1, IOB2 (BIO) and BIOES; their detection, checking,
conversion, and entity extraction with seqeval's conventions.

A tag is `O` or `<prefix>-<TYPE>`, prefix one of B, I, E, S. The three schemes differ in
where an entity's first tag says "begin":

- IOB1 (CoNLL-2003's original files): an entity starts with `I-`; `B-` only starts an entity
  that directly follows another of the same type (`I-PER B-PER`: two people).
- IOB2, also called BIO (CoNLL-2000): every entity starts with `B-`.
- BIOES: `B-` begins, `I-` continues, `E-` ends a multi-token entity; `S-` is a one-token
  entity.

`get_entities` reads any of them (and mixes of them) the way seqeval's default, non-strict
mode reads them (`seqeval.metrics.sequence_labeling.get_entities`): the tests compare the two
on random sequences. The original's chunk reader (`scorers.get_span_labels`) is another
reading; docs/faithfulness.md shows where they differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from electra_tf.finetuning.task import DataError

TAG_SCHEMES = ("IOB1", "IOB2", "BIOES")
PREFIXES = ("B", "I", "E", "S")

# (type, start, end inclusive): seqeval's entity tuple.
Entity = tuple[str, int, int]


def is_valid_tag(tag: str) -> bool:
    """`O`, or one of B/I/E/S, a hyphen and a non-empty type (`B-PER`, `I-MISC`)."""
    return tag == "O" or (len(tag) > 2 and tag[0] in PREFIXES and tag[1] == "-")


def check_tag(tag: str, where: str) -> str:
    """`tag`, or a DataError naming `where` ("file:line") and the fix."""
    if not is_valid_tag(tag):
        raise DataError(
            f"{where}: tag {tag!r} is not O or B-/I-/E-/S- followed by a type (e.g. B-PER); "
            "fix the tag, or name the tag column if this is not it"
        )
    return tag


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): ("O", "") for O; ("B", "PER") for B-PER."""
    if tag == "O":
        return "O", ""
    return tag[0], tag[2:]


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """The scheme of `tag_sequences` (one sequence a sentence): "BIOES" if any tag is E- or
    S-; else "IOB1" if any entity starts with I- (at a sentence start, after O or after a tag
    of another type); else "IOB2" (also when there are no entities: IOB2 reads them as any)."""
    iob1 = False
    for tags in tag_sequences:
        previous = "O"
        for tag in tags:
            prefix, kind = split_tag(tag)
            if prefix in ("E", "S"):
                return "BIOES"
            if prefix == "I" and (previous == "O" or split_tag(previous)[1] != kind):
                iob1 = True
            previous = tag
    return "IOB1" if iob1 else "IOB2"


def _ends(previous: str, prefix: str, previous_type: str, kind: str) -> bool:
    """Whether an entity ended before this tag (seqeval's `end_of_chunk`)."""
    if previous in ("E", "S"):
        return True
    if previous in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return previous != "O" and previous_type != kind


def _starts(previous: str, prefix: str, previous_type: str, kind: str) -> bool:
    """Whether an entity starts at this tag (seqeval's `start_of_chunk`)."""
    if prefix in ("B", "S"):
        return True
    if prefix in ("I", "E") and previous in ("E", "S", "O"):
        return True
    return prefix != "O" and previous_type != kind


def get_entities(tags: Sequence[str]) -> list[Entity]:
    """Entities of one sentence, `(type, start, end)` with `end` inclusive, in order.

    seqeval's non-strict reading of any scheme: an entity ends at O, at B-/S-, after E-/S-,
    or where the type changes; it starts at B-/S-, at I-/E- after O, E- or S-, or where the
    type changes. So `I-PER I-PER` (IOB1) is one PER, `B-PER I-LOC` a PER and a LOC.
    """
    entities: list[Entity] = []
    previous, previous_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, kind = split_tag(tag)
        if _ends(previous, prefix, previous_type, kind):
            entities.append((previous_type, begin, i - 1))
        if _starts(previous, prefix, previous_type, kind):
            begin = i
        previous, previous_type = prefix, kind
    return entities


def entities_to_tags(entities: Iterable[Entity], length: int, scheme: str) -> list[str]:
    """`length` tags writing `entities` (non-overlapping) in `scheme`."""
    if scheme not in TAG_SCHEMES:
        raise ValueError(f"tag scheme {scheme!r} is not one of {TAG_SCHEMES}")
    tags = ["O"] * length
    previous_end, previous_type = -2, ""
    for kind, start, end in sorted(entities, key=lambda e: e[1]):
        for i in range(start, end + 1):
            tags[i] = f"I-{kind}"
        if scheme == "BIOES":
            tags[start] = f"S-{kind}" if start == end else f"B-{kind}"
            if end > start:
                tags[end] = f"E-{kind}"
        elif scheme == "IOB2" or (previous_end == start - 1 and previous_type == kind):
            tags[start] = f"B-{kind}"
        previous_end, previous_type = end, kind
    return tags


def convert(tags: Sequence[str], scheme: str) -> list[str]:
    """`tags` (any scheme) rewritten in `scheme`, the entities `get_entities` reads kept."""
    return entities_to_tags(get_entities(tags), len(tags), scheme)


def bioes_to_iob2(tag: str) -> str:
    """One BIOES tag as IOB2 (S- -> B-, E- -> I-): tag by tag, a BIOES sequence becomes the
    IOB2 sequence of the same entities."""
    prefix, kind = split_tag(tag)
    return {"S": f"B-{kind}", "E": f"I-{kind}"}.get(prefix, tag)
