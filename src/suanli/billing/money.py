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
#: the largest amount one request may name (a top-up, a price, a limit, GiB moved): far
#: above any real one, and small enough that balances and sums of many of them stay
#: within the ledger's 64-bit integer columns (2**63 micro-units is about 9.2e12 units)
MAX_AMOUNT = Decimal(1_000_000_000)
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
    if abs(d) > MAX_AMOUNT:
        raise MoneyError(f"at most {MAX_AMOUNT} in absolute value, got {value!r}")
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


def fmt_exact(micros: int, currency: str = "CNY") -> str:
    """``¥1,234.567891``, ``¥0.64``: exact to the micro-unit, at least 2 places, no trailing
    zeros beyond them. What a document shows when its amounts must add up as shown: a
    sum of lines rounded one by one need not be the rounded total (¥0.64 + ¥0.01 = ¥0.64)."""
    m = int(micros)
    whole, frac = divmod(abs(m), MICROS)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    sym = SYMBOLS.get(currency)
    return f"{'-' if m < 0 else ''}{sym or ''}{whole:,}.{digits}{'' if sym else ' ' + currency}"


def as_text(micros: int) -> str:
    """Exact decimal text for JSON (no float rounding): ``"1.960000"``."""
    return f"{to_decimal(micros):.6f}"


#: The largest spot bid accepted, per GPU-hour: far above any real price, and small
#: enough that micro-units stay exact 64-bit integers in every rating product.
MAX_BID = Decimal(1_000_000)


def parse_max_price(value: object) -> str:
    """A spot bid (``max_price``) as written by a renter — decimal text or a YAML number,
    per GPU-hour in the book's currency — checked and returned as canonical decimal text.
    Raises ``MoneyError`` saying what is wrong (the caller names the field)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise MoneyError(f'expected decimal text per GPU-hour such as "1.20", got {value!r}')
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise MoneyError(f'not a decimal amount: {value!r} (expected decimal text per GPU-hour such as "1.20")') from None
    if not d.is_finite():
        raise MoneyError(f"not a finite amount: {value!r}")
    if d < 0:
        raise MoneyError(f"must not be negative, got {value!r}")
    if d == 0:
        raise MoneyError(f"must be above zero (a bid of 0 never runs), got {value!r}")
    if d > MAX_BID:
        raise MoneyError(f"at most {MAX_BID} per GPU-hour, got {value!r}")
    if d != d.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP):
        raise MoneyError(f"at most 6 decimal places (micro-units), got {value!r}")
    return format(d, "f")


def price_text(micros: int) -> str:
    """Exact decimal text with at least 2 places and no trailing zeros beyond them:
    ``1_200_000`` -> ``"1.20"``, ``392_000`` -> ``"0.392"``."""
    text = f"{to_decimal(micros):.6f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def fmt_price(micros: int, currency: str = "CNY", up_to_cents: bool = False) -> str:
    """A price for messages, exact to the micro-unit (``¥1.20``, ``¥0.392``), or rounded
    up to the cent (``¥4.286186`` -> ``¥4.29``: a price said to be above a bid stays above it)."""
    if up_to_cents:
        micros = -(-int(micros) // 10_000) * 10_000
    sym = SYMBOLS.get(currency)
    return f"{sym or ''}{price_text(micros)}{'' if sym else ' ' + currency}"
