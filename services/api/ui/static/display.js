// How the pages' scripts show values: durations, sizes and times by the rules of
// shared/display.py (duration_text, size_text, time_text with a space between date and
// time), which the server uses for the same values; tests/ui/test_display_parity.py holds
// the two to the same answers.
"use strict";

(() => {
  const SIZE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  const pad = (n) => String(n).padStart(2, "0");

  // "0.4s", "12.3s", "3m 04s", "2h 05m"; "-" for none.
  function duration(seconds) {
    if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "-";
    const value = Math.max(0, seconds);
    if (Math.round(value * 10) / 10 < 60) return `${value.toFixed(1)}s`;
    const whole = Math.floor(value + 0.5);
    if (whole < 3600) return `${Math.floor(whole / 60)}m ${pad(whole % 60)}s`;
    return `${Math.floor(whole / 3600)}h ${pad(Math.floor((whole % 3600) / 60))}m`;
  }

  // "512 B", "1.5 KiB", "64.0 MiB"; "-" for none.
  function size(bytes) {
    if (bytes === null || bytes === undefined) return "-";
    let value = Number(bytes);
    for (const unit of SIZE_UNITS) {
      if (Math.abs(value) < 1024 || unit === SIZE_UNITS[SIZE_UNITS.length - 1]) {
        return unit === "B" ? `${Math.trunc(value)} B` : `${value.toFixed(1)} ${unit}`;
      }
      value /= 1024;
    }
    return "-";
  }

  // A Date in the IANA ``zone``, to the second: "2026-12-02 09:00:00+09:00", "...Z" for UTC.
  const formats = new Map();
  function time(instant, zone) {
    if (!formats.has(zone)) {
      formats.set(zone, new Intl.DateTimeFormat("en-CA", {
        timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "longOffset",
      }));
    }
    const parts = {};
    for (const part of formats.get(zone).formatToParts(instant)) parts[part.type] = part.value;
    const offset = (parts.timeZoneName || "GMT").replace("GMT", "");
    return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}` +
      (offset === "" || offset === "+00:00" ? "Z" : offset);
  }

  window.TickworkDisplay = { duration, size, time };
})();
