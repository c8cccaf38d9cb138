package spectral.interop;

import java.time.DateTimeException;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.temporal.ChronoUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Section 1's timestamps: RFC 3339 read with any offset, written in UTC with six digits. */
final class Timestamps {
  private static final Pattern LAYOUT =
      Pattern.compile(
          "([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
              + "(?:\\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))");
  static final Instant EARLIEST = Instant.parse("1970-01-01T00:00:00Z");
  static final Instant END = Instant.parse("9999-01-01T00:00:00Z");
  private static final DateTimeFormatter WRITTEN =
      DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSSSS'Z'").withZone(ZoneOffset.UTC);

  private Timestamps() {}

  /** The instant of ``text``, digits below the microsecond truncated; refused: an exception. */
  static Instant parse(String text) {
    Matcher m = LAYOUT.matcher(text);
    if (!m.matches()) {
      throw new IllegalArgumentException("not an RFC 3339 date-time: " + text);
    }
    int year = Integer.parseInt(m.group(1));
    if (year < 1970 || year > 9998) {
      throw new IllegalArgumentException("the year as written must be 1970 to 9998");
    }
    int offsetHours = m.group(8) != null ? 0 : Integer.parseInt(m.group(10));
    int offsetMinutes = m.group(8) != null ? 0 : Integer.parseInt(m.group(11));
    if (offsetHours > 23 || offsetMinutes > 59) {
      throw new IllegalArgumentException("an offset beyond 23:59");
    }
    String fraction = m.group(7) == null ? "" : m.group(7);
    int micros = Integer.parseInt((fraction + "000000").substring(0, 6));
    LocalDateTime local;
    try { // the calendar, hours 0-23, minutes and seconds 0-59 (no leap second)
      local =
          LocalDateTime.of(
              LocalDate.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3))),
              LocalTime.of(
                  Integer.parseInt(m.group(4)),
                  Integer.parseInt(m.group(5)),
                  Integer.parseInt(m.group(6)),
                  micros * 1000));
    } catch (DateTimeException e) {
      throw new IllegalArgumentException(e.getMessage(), e);
    }
    int sign = "-".equals(m.group(9)) ? -1 : 1;
    // java.time offsets stop at 18 hours, RFC 3339's (and the contract's) at 23:59
    Instant instant =
        local.toInstant(ZoneOffset.UTC).minusSeconds(sign * (offsetHours * 3600L + offsetMinutes * 60L));
    if (instant.isBefore(EARLIEST) || !instant.isBefore(END)) {
      throw new IllegalArgumentException("the instant lies outside 1970-01-01 .. 9999-01-01");
    }
    return instant;
  }

  /** The written form: YYYY-MM-DDTHH:MM:SS.ffffffZ. */
  static String write(Instant instant) {
    return WRITTEN.format(instant.truncatedTo(ChronoUnit.MICROS));
  }
}
