"""A small built-in text corpus for training the tokenizers of test checkpoints.

`kime.synthetic` trains a real `tokenizers` BPE on this text, so a checkpoint written without
network access still tokenizes the way the texts in the goldens look: prose, support tickets and
emails, JSON-ish documents, numbers, and a few lines in German, French, Spanish and Japanese with
emoji. Changing a single character here changes every trained vocabulary and so every golden
built from it; treat the text as frozen.
"""
from __future__ import annotations

from typing import List

_ENGLISH = """\
The morning train to the coast was late again, and nobody on the platform seemed surprised.
A woman with a green umbrella read the timetable twice, then folded her newspaper and sighed.
Small decisions add up: which route to take, which form to fill in, which email to answer first.
The committee agreed to postpone the vote until the budget review was complete.
Please remember that the library closes early on public holidays and during the summer months.
He wrote the report in one sitting, checked the numbers, and sent it before lunch.
Most customers never read the terms of service, but the ones who do tend to ask good questions.
The river rose quickly after three days of rain, flooding the lower fields near the old mill.
Our team shipped the new release on Tuesday; the migration guide is linked in the changelog.
If the device does not turn on, hold the power button for ten seconds and try again.
She asked whether the meeting could be moved to Thursday afternoon instead of Friday morning.
The results were promising but not conclusive, so the study will continue for another year.
Every question has a type: a choice between labelled options, a score on a scale, or a statement.
The statement is either true or false, and the model reports how likely it is to hold.
A calibrated probability means that, of the answers given with confidence 0.8, about 80% are right.
Long documents are truncated from the end, while conversations keep their most recent turns.
The quick brown fox jumps over the lazy dog near the quiet riverbank at dawn.
Nothing in this paragraph is important; it only gives the tokenizer more words to learn from.
Revenue grew by 12.5% year over year, while operating costs fell to 3.2 million dollars.
Shipping usually takes three to five business days, or one to two days with express delivery.
Before the storm arrived, the fishermen pulled their boats high onto the shingle and tied them down.
The bakery on the corner opens at six, and by seven the queue stretches past the bookshop next door.
Engineers measured the bridge every spring, recording how far the steel expanded in the afternoon heat.
A good manual explains why a step matters, not only which button to press next.
The orchestra rehearsed the final movement slowly, then twice at full tempo, until the brass section agreed.
My grandmother kept every letter she ever received in a tin box under the stairs.
Volunteers planted four hundred trees along the northern edge of the park last autumn.
When the power failed, the hospital switched to its generators within eleven seconds.
Children learn languages by listening long before they are able to speak a complete sentence.
The museum's new wing displays tools, maps and instruments from early scientific expeditions.
Security researchers disclosed the vulnerability responsibly and the vendor patched it within a week.
Please attach a screenshot, the exact error message, and the steps that led to the problem.
The warranty covers manufacturing defects for two years but not accidental damage or normal wear.
Traffic on the motorway was slow because of roadworks between junctions twelve and fifteen.
Researchers found that sleep, exercise and a varied diet matter more than any single supplement.
The contract renews automatically unless either party gives thirty days of written notice.
Our office will be closed from December 24 to January 2; urgent requests are handled by email.
The chef recommends the mushroom risotto, followed by a lemon tart with fresh cream.
Satellites photographed the glacier each month, revealing how quickly its edge was retreating.
Students must submit their essays through the online portal before midnight on Friday.
"""

_TICKETS = """\
Subject: Refund request for order #48213
Hi support team, I was charged twice for my subscription this month. Could you refund the duplicate payment?
Thanks, Maria

Subject: Password reset not working
Hello, I tried to reset my password three times but the link in the email has already expired every time.
Can someone help me log in? My username is j.doe and the account email is j.doe@example.com.

Subject: URGENT - production outage
Our dashboard has returned HTTP 503 errors since 09:42 UTC. This is blocking our whole sales team.
Please escalate to on-call engineering immediately.

Subject: Feature request: dark mode
Would it be possible to add a dark theme to the mobile app? My eyes get tired in the evening.
Not urgent at all, just an idea. Keep up the great work!

Subject: Invoice address change
Dear billing department, please update the invoice address to 221B Baker Street, London NW1 6XE.
The VAT number stays the same. Kind regards, Thomas Becker, Finance Manager

Subject: Cancel my account
I no longer need the service. Please cancel my account and delete my personal data under GDPR.

Ticket status: open | priority: high | assignee: unassigned | created: 2024-03-18T14:05:00Z
Ticket status: closed | priority: low | assignee: support-bot | created: 2023-11-02T08:30:12Z
Customer: "The app crashes whenever I upload a photo larger than 10 MB."
Agent: "Thanks for reporting this. Which phone model and app version are you using?"
Customer: "iPhone 13, version 4.2.1. It started after the last update."
Agent: "We have reproduced the crash and a fix will ship in version 4.2.2 next week."
User: I want to change my delivery slot to Saturday.
Assistant: Sure, I can help with that. Which order would you like to change?
User: Order 7719, the one with the bookshelf.
Assistant: Done. Your delivery is now scheduled for Saturday between 10:00 and 14:00.

Subject: Wrong item delivered
I ordered a blue kettle (order #55102) but received a red toaster instead. How do I exchange it?

Subject: Question about pricing plans
Is the annual plan billed upfront, and can I switch from the monthly plan without losing my data?

Subject: Complaint about delivery driver
The courier left my parcel in the rain outside the building although I was at home all day.
I am very disappointed and would like compensation for the damaged contents.

Subject: API rate limit exceeded
Since yesterday our integration receives "429 Too Many Requests" even at low volume. Is there an incident?
Request id: 3f9c2a71-8d44-4e0b-9a51-0c7e2b1d6f10, endpoint: POST /v2/orders, region: eu-west-1.

Subject: Thank you!
Just wanted to say thanks to Priya for solving my issue so quickly yesterday. Excellent service.

Subject: Security concern
I received an email asking me to confirm my bank details. Is this message really from your company?
From: "Billing Team" <no-reply@secure-payments.example.net>
To: customer@example.com
Date: Mon, 4 Mar 2024 10:15:00 +0100
Reply-To: support@example.com
"""

_JSON = """\
{"id": 1042, "name": "Ada Lovelace", "email": "ada@example.org", "active": true, "score": 98.6}
{"order": {"id": "A-7781", "items": [{"sku": "BK-001", "qty": 2, "price": 12.99}], "paid": false}}
{"event": "login", "user_id": 55, "ip": "192.168.0.17", "success": true, "attempts": null}
{"status": "error", "code": 404, "message": "Resource not found", "retry": false}
{"temperature": -3.5, "humidity": 0.82, "wind_kmh": 27, "station": "Oslo-Blindern"}
{"tags": ["billing", "refund", "priority"], "count": 3, "nested": {"a": {"b": {"c": []}}}}
[{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello, how can I help?"}]
{"config": {"max_len": 512, "head_max_len": 192, "temperature": [1.0, 1.0, 1.0]}}
{"ticket": {"id": 90211, "subject": "Login loop", "priority": "medium", "labels": ["auth", "web"]}}
{"user": {"name": "José García", "locale": "es-ES", "verified": false, "roles": ["viewer", "editor"]}}
{"metrics": {"p50_ms": 12.4, "p95_ms": 88.1, "p99_ms": 240.7, "errors": 0, "requests": 125000}}
"""

_NUMBERS = """\
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 30 42 50 64 99 100 128 256 512 1000 1024
3.14159 2.71828 1.41421 0.5 0.25 0.125 -1 -42 1e-5 6.02e23 99.9% 45,000 1,250,000 $19.99 EUR 7.50
2024-01-15 2023-12-31 11:59 PM 08:00 +44 20 7946 0958 ISBN 978-3-16-148410-0 v2.3.1 #4521
"""

_OTHER_LANGUAGES = """\
Guten Morgen! Könnten Sie mir bitte die Rechnung für März noch einmal schicken?
Die Lieferung ist leider beschädigt angekommen, und ich möchte das Paket zurückgeben.
Straße, Größe, Übermaß, schön, müde, fröhlich: Umlaute und das scharfe S gehören dazu.
Bonjour, je voudrais annuler ma commande passée hier soir, s'il vous plaît.
Le colis n'est pas arrivé et le suivi n'a pas été mis à jour depuis une semaine.
Où est la gare ? Ça coûte combien ? Très bien, merci beaucoup et à bientôt !
Hola, ¿puedo cambiar la dirección de entrega de mi pedido? Gracias de antemano.
El producto llegó roto y necesito un reembolso lo antes posible, por favor.
¡Qué día tan bonito! La reunión será el miércoles a las diez de la mañana.
こんにちは。注文した商品がまだ届いていません。確認していただけますか。
パスワードを忘れてしまいました。再設定の方法を教えてください。
東京は今日も晴れです。明日の会議は午後三時からです。よろしくお願いします。
Great job team 🎉🚀 see you all tomorrow 👋
The package arrived broken 😞 please help 🙏
Love the new update ❤️ works perfectly ✅
Weather today: ☀️ 24°C, tomorrow 🌧️ 17°C
"""


def corpus_lines() -> List[str]:
    """The corpus as a list of non-empty lines, the unit the BPE trainer counts words in."""
    text = "\n".join([_ENGLISH, _TICKETS, _JSON, _NUMBERS, _OTHER_LANGUAGES])
    return [line for line in text.splitlines() if line.strip()]
