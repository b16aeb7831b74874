"""Money as integers: every amount the ledger posts is an ``int`` of micro-units
(1e-6 of the book's currency).

Why micro-units and not fen: one 6-second unit of a tenth of an RTX 4090 costs
¥0.000327; rounding each usage record to fen would silently drop it. Amounts are
computed exactly in integers and rounded half-up once per record, so a sum of
records is a sum of integers and a ledger always balances to the last unit.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

MICROS = 1_000_000
SYMBOLS = {"CNY": "¥", "USD": "$", "EUR": "€"}


class MoneyError(ValueError):
    """A price or amount that cannot be represented (negative, not a number)."""


def to_micros(value: str | int | float | Decimal, *, allow_negative: bool = False) -> int:
    """Decimal text (``"1.96"``) to micro-units, half-up; floats go through ``str``
    so 1.96 stays 1.96 rather than 1.9599999."""
    try:
        d = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise MoneyError(f"not a number: {value!r}") from None
    if not d.is_finite():
        raise MoneyError(f"not a finite amount: {value!r}")
    if d < 0 and not allow_negative:
        raise MoneyError(f"negative amount: {value!r}")
    return int((d * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def to_decimal(micros: int) -> Decimal:
    return Decimal(int(micros)) / MICROS


def div_half_up(num: int, den: int) -> int:
    """Integer division rounded half away from zero (den > 0)."""
    if num >= 0:
        return (num + den // 2) // den
    return -((-num + den // 2) // den)


def fmt(micros: int, currency: str = "CNY", places: int = 2) -> str:
    """``¥1,234.57`` — display only, rounded half-up to ``places``."""
    q = to_decimal(micros).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    sym = SYMBOLS.get(currency)
    return f"{'-' if q < 0 else ''}{sym or ''}{abs(q):,}{'' if sym else ' ' + currency}"


def as_text(micros: int) -> str:
    """Exact decimal text for JSON (no float rounding): ``"1.960000"``."""
    return f"{to_decimal(micros):.6f}"
