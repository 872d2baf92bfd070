"""Reads the metrics.jsonl files kiln's examples write (one JSON object a line, each with a "record"
field naming its kind), for tools/plot.py and tools/record_training.py. Standard library only.
"""
import json


class BadInput(Exception):
    """A problem with the files or arguments given: the tools exit with status 2."""


def read_records(path):
    """(line number, record) for each non-blank line of a metrics file; BadInput names the file and
    line of anything else."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{number}: not a JSON line ({e.msg})") from None
                if not isinstance(record, dict) or "record" not in record:
                    raise BadInput(f'{path}:{number}: not a record (a JSON object with a "record" field)')
                records.append((number, record))
    except OSError as e:
        raise BadInput(f"{path}: cannot read it ({e.strerror})") from None
    return records
