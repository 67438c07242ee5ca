"""The registry itself: every claim is checked, every erratum documented."""

import re
from pathlib import Path

from paper_checks.registry import CLAIMS, ERRATUM, NOT_HERE, VERIFIED

HERE = Path(__file__).parent


def _marked_ids():
    ids = set()
    for path in HERE.glob("test_*.py"):
        for args in re.findall(r"mark\.claim\(([^)]*)\)", path.read_text()):
            ids.update(re.findall(r"\"([^\"]+)\"", args))
    return ids


def test_every_checkable_claim_has_a_check():
    marked = _marked_ids()
    missing = [c.id for c in CLAIMS if c.status in (VERIFIED, ERRATUM) and c.id not in marked]
    assert not missing, f"claims without a check: {missing}"
    unknown = marked - {c.id for c in CLAIMS}
    assert not unknown, f"checks citing unknown claims: {unknown}"


def test_rows_are_complete():
    for c in CLAIMS:
        assert c.status in (VERIFIED, ERRATUM, NOT_HERE), c.id
        assert c.ref and c.claim, c.id
        if c.status == NOT_HERE:
            assert c.reason, c.id
        else:
            assert c.methods, c.id
        if c.status == ERRATUM:
            assert c.printed and c.corrected and c.evidence, c.id
