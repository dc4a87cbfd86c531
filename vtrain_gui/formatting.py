"""Text formatting of core figures for display (no computation beyond unit scaling)."""

from __future__ import annotations

import math
from typing import Callable

from core.util.text import format_days

__all__ = ["format_duration", "format_durations", "duration_formatter", "format_bytes", "format_count", "format_day_count", "format_usd",
           "format_fraction", "format_rate", "format_number_short", "format_usd_short",
           "KIND_COLORS", "IDLE_COLOR", "ERROR_STYLE", "VERDICT_COLORS", "MAX_MESSAGE_CHARS",
           "message_text", "short_text"]

#: Style sheet of a label that reports an error.
ERROR_STYLE = "color: #C62828;"

#: Text colour of the memory verdicts that need attention (:data:`core.sim.report.MEMORY_VERDICTS`).
VERDICT_COLORS = {"tight": "#b07800", "does not fit": "#c0392b"}

#: Colour of idle time (the pipeline bubble): the timeline's compute lanes between bars
#: (vtrain_gui.timeline.colors.LANE_COLORS), its legend's swatch and the cost panel's time
#: breakdown; one colour, so what the lanes show is what both legends name (they were #EEF1F6
#: on the lanes, #DCE1EA and #C9CED6 in the legends).
IDLE_COLOR = "#DCE1EA"

#: Colour per kind name (Okabe-Ito / Tableau-like, distinguishable by most colour-blind readers).
KIND_COLORS = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "recompute": "#B279A2",
    "embedding": "#72B7B2",
    "output": "#9D755D",
    "optimizer": "#E45756",
    "tp_comm": "#54A24B",
    "pp_p2p": "#EECA3B",
    "dp_comm": "#7F7F7F",
    "wgrad": "#FFBF79",
    "cp_p2p": "#17BECF",
    "ep_all_to_all": "#6A3D9A",  # not the optimizer's red (tester)
}


def format_duration(seconds: float) -> str:
    """``0.0123`` -> ``'12.30 ms'``; picks s, ms, µs or ns."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    a = abs(seconds)
    if a >= 1.0 or a == 0.0:
        return f"{seconds:.3f} s"
    if a >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if a >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.1f} ns"


def duration_formatter(*seconds: float) -> Callable[[float], str]:
    """A formatter of durations (seconds) in the one unit :func:`format_duration` picks for the
    largest of ``seconds``, for a group of figures read together (a column, a range):
    ``duration_formatter(2.301, 0.13037)`` formats ``0.13037`` as ``'0.130 s'``, not
    ``'130.37 ms'`` beside ``'2.301 s'``. Its value of None or of a number not finite is
    ``'–'``; values not finite are left out of the choice."""
    finite = [abs(v) for v in seconds if v is not None and math.isfinite(v)]
    a = max(finite, default=0.0)
    scale, unit, digits = ((1.0, "s", 3) if a >= 1.0 or a == 0.0 else (1e3, "ms", 2) if a >= 1e-3
                           else (1e6, "µs", 2) if a >= 1e-6 else (1e9, "ns", 1))

    def fmt(v: float) -> str:
        return f"{v * scale:.{digits}f} {unit}" if v is not None and math.isfinite(v) else "–"
    return fmt


def format_durations(*seconds: float) -> list[str]:
    """Durations printed side by side, all in the unit :func:`format_duration` picks for the
    largest: ``(0.0, 0.01398)`` -> ``['0.00 ms', '13.98 ms']``, not ``'0.000 s'`` beside
    ``'13.98 ms'``. A value that is None or not finite is ``'–'``."""
    fmt = duration_formatter(*seconds)
    return [fmt(v) for v in seconds]


def format_bytes(num_bytes: float) -> str:
    """Bytes in GiB (or MiB below one GiB), e.g. ``'61.3 GiB'``."""
    if num_bytes is None or not math.isfinite(num_bytes):
        return "–"
    if abs(num_bytes) >= 2**30:
        return f"{num_bytes / 2**30:,.1f} GiB"
    return f"{num_bytes / 2**20:,.1f} MiB"


def format_count(value: float, decimals: int = 0) -> str:
    """Thousands separators: ``1234567.8`` -> ``'1,234,568'``."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.{decimals}f}"


def format_gpus(n: int) -> str:
    """``'1 GPU'``, ``'1,024 GPUs'``."""
    return f"{format_count(int(n))} GPU{'' if int(n) == 1 else 's'}"


def format_day_count(value: float) -> str:
    """Training days as the command line prints them (:func:`core.util.text.format_days`:
    under one day three decimals, ``'0.043'``, not ``'0.0'``); ``'–'`` when not finite."""
    if value is None or not math.isfinite(value):
        return "–"
    return format_days(value)


def format_usd(value: float) -> str:
    """``1234567.8`` -> ``'$1,234,568'``."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"${value:,.0f}"


def format_fraction(value: float) -> str:
    """A fraction 0..1 as a percentage, ``0.4312`` -> ``'43.1 %'``."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:.1f} %"


def format_rate(value: float, unit: str) -> str:
    """Large rates with thousands separators, e.g. ``'152,340 tokens/s'``."""
    return f"{format_count(value)} {unit}"


def format_number_short(value: float) -> str:
    """Axis ticks: three significant digits, thousands separators from 1,000 (``'2.5'``, ``'60,000'``)."""
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_usd_short(value: float) -> str:
    """Dollars with a k / M / B suffix and three significant digits, ``2.5e6`` -> ``'$2.5M'``."""
    if value is None or not math.isfinite(value):
        return "–"
    a = abs(value)
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            return f"${value / scale:.3g}{suffix}"
    return f"${value:.3g}"


#: Most characters of a reader's message a message box shows (:func:`message_text`).
MAX_MESSAGE_CHARS = 1_500


def message_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as a message box shows it: whole up to ``limit`` characters, else its start
    (the file and the key) and its end (the rule), the middle left out and counted. A reader
    that quotes a megabyte value (a Hugging Face ``hidden_act`` or a torchtitan
    ``model.name`` of a million characters) made a box that took half a minute to lay out
    and was taller than any screen, its OK button out of reach."""
    if len(text) <= limit:
        return text
    head, tail = 2 * limit // 3, limit // 4
    cut = len(text) - head - tail
    return f"{text[:head]} … ({cut:,} characters left out) … {text[-tail:]}"


def short_text(text: str, limit: int) -> str:
    """``text`` whole up to ``limit`` characters, else cut at the last space before it and
    ended with "…" (within ``limit`` characters with it; mid-word only where no space is):
    ``short_text("large sweep: the 1,011,950 plans", 20)`` -> ``'large sweep: the…'``."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = head.rfind(" ")
    return (head[:cut] if cut > 0 else head).rstrip(" ,;:") + "…"
