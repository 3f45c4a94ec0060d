"""`laya.email` at kime's path (`from kime.email import email_state`): Laya's email cleaning,
from `kime.laya.email`, and `email_questions`, which Laya re-exports here too."""
from .laya.email import clean_email_body, email_questions, email_state

__all__ = ["clean_email_body", "email_questions", "email_state"]
