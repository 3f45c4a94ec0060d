"""Every tolerance the tests use, in one place, with why."""

# Laya rounds to 4 decimals; two correct float32 implementations can land on either side of a
# rounding boundary, so a rounded number may differ by one unit in the last place.
ROUNDED = 1e-4 + 1e-9
# Raw option logits from the NumPy reference against torch's FP32 forward.
LOGITS = 1e-4
# Act-head probabilities (unrounded) against torch.
ACT = 1e-5
