"""Laya 0.4.15's LangChain and LangGraph integration on kime (`kime.integrations.langchain` is
`laya.integrations.langchain`): `LayaRouter` (`router`), `LayaGuardrail` and
`LayaGuardrailError` (`guardrail`), `LayaTriage` and `LayaEvaluator` (`nodes`), `LayaDecision`
(`decision`), over what they share (`base`: fields, `invoke`, the one-pass `batch`; `text`:
reading the state out of an input). Importing it needs langchain-core, and names
`pip install 'kime[langchain]'` when it is missing.

    import kime
    from langchain_core.runnables import RunnableLambda
    from kime.integrations.langchain import LayaRouter

    router = LayaRouter(criteria={"billing": "Payments and refunds", "tech": "Bugs"},
                        agent=kime.load("laya"))        # or base_url="http://host:8000"
    chain = RunnableLambda(lambda ticket: ticket["body"]) | router
    chain.invoke({"body": "I was charged twice"})      # "billing"
    chain.batch([...])                                  # one engine pass
    graph.add_conditional_edges("start", router, {"billing": "billing", "tech": "tech"})
"""
from __future__ import annotations

from .decision import LayaDecision
from .guardrail import LayaGuardrail, LayaGuardrailError
from .nodes import LayaEvaluator, LayaTriage
from .router import LayaRouter

__all__ = ["LayaRouter", "LayaGuardrail", "LayaGuardrailError", "LayaTriage", "LayaEvaluator",
           "LayaDecision"]
