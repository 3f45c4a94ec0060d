"""Raw outputs -> answers (`kime.answers`): an option count the row does not carry is an error,
never an answer in slot order or under another label (issue 53: the reorder was skipped
silently when `len(order) != k`)."""
from __future__ import annotations

import numpy as np
import pytest

import kime
from kime.answers import make_answer
from kime.render import to_question

CHOICE = {"type": "choice", "instructions": "Which team?",
          "criteria": ["billing", "tech", "sales"], "option_order": [2, 0, 1]}


def test_an_option_order_is_undone():
    q = to_question("team", CHOICE)
    a = make_answer(q, np.array([3.0, 1.0, 2.0], np.float32), np.zeros(3, np.float32), 1.0)
    # slot 0 showed option 2 (sales), slot 1 option 0 (billing), slot 2 option 1 (tech)
    assert a.logits.tolist() == [1.0, 2.0, 3.0] and a.value == "sales"


@pytest.mark.parametrize("qdef, k", [(CHOICE, 2), (CHOICE, 4),
                                     ({**CHOICE, "option_order": None}, 2),
                                     ({"type": "noul", "instructions": "Spam?"}, 3),
                                     ({"type": "score", "instructions": "Rate it.",
                                       "criteria": ["low", "mid", "high"]}, 1)])
def test_logits_that_do_not_match_the_options_are_refused(qdef, k):
    q = to_question("q", {key: v for key, v in qdef.items() if v is not None})
    with pytest.raises(kime.BackendError, match="'q': %d logits for %d options" % (k, q.n_options)):
        make_answer(q, np.linspace(0, 1, k).astype(np.float32), np.zeros(3, np.float32), 1.0)
