package spectral.interop;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;

/**
 * JSON as the contract reads it (section 1 of the spec): UTF-8 I-JSON text, no byte order mark,
 * nesting at most 1,024 levels. Jackson's defaults contradict it in six ways, each overridden:
 *
 * <ol>
 *   <li>nesting: Jackson stops at 1,000 levels (StreamReadConstraints), the contract at 1,024;
 *   <li>a UTF-8 byte order mark is skipped silently: refused here;
 *   <li>content after the first value is ignored: FAIL_ON_TRAILING_TOKENS;
 *   <li>UTF-16 and UTF-32 input is detected and read: bytes are decoded here, strictly as UTF-8,
 *       and Jackson reads the resulting text;
 *   <li>a number overflowing a double ({@code 1e400}) is read as Infinity: numbers are read as
 *       BigDecimal and an overflowing one refused;
 *   <li>a lone surrogate escape ({@code "\ud800"}) is kept in the string: refused here.
 * </ol>
 */
final class StrictJson {
  static final int MAX_NESTING = 1024;

  /** Reads records: the overrides above. */
  static final ObjectMapper READER =
      JsonMapper.builder(
              JsonFactory.builder()
                  .streamReadConstraints(
                      StreamReadConstraints.builder().maxNestingDepth(MAX_NESTING).build())
                  .build())
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
          .build();

  /**
   * Writes RFC 8785 canonical text for the values the contract hashes: members sorted by name
   * as UTF-16 code units (String order; Jackson keeps insertion order by default), no
   * whitespace, UTF-8 with characters above U+FFFF written as themselves (Jackson escapes them
   * as a surrogate pair by default), control characters escaped with lowercase hex (Jackson
   * writes upper case by default), nothing else escaped.
   */
  static final ObjectMapper CANONICAL =
      JsonMapper.builder()
          .enable(JsonNodeFeature.WRITE_PROPERTIES_SORTED)
          .enable(JsonWriteFeature.COMBINE_UNICODE_SURROGATES_IN_UTF8)
          .disable(JsonWriteFeature.WRITE_HEX_UPPER_CASE)
          .build();

  /**
   * Writes records: Jackson's output is valid for the contract in any member order; astral
   * characters are written as themselves here too (escaped pairs would be valid, and longer).
   */
  static final ObjectMapper WRITER =
      JsonMapper.builder().enable(JsonWriteFeature.COMBINE_UNICODE_SURROGATES_IN_UTF8).build();

  private StrictJson() {}

  /** A value the contract does not read as JSON: the reason not_json, with why. */
  static final class NotJson extends Exception {
    private static final long serialVersionUID = 1L;

    NotJson(String why) {
      super(why);
    }
  }

  static JsonNode parse(byte[] value) throws NotJson {
    String text;
    try {
      text =
          StandardCharsets.UTF_8
              .newDecoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .decode(ByteBuffer.wrap(value))
              .toString();
    } catch (CharacterCodingException e) {
      throw new NotJson("not UTF-8: " + e);
    }
    if (text.startsWith("\uFEFF")) {
      throw new NotJson("a byte order mark");
    }
    JsonNode node;
    try {
      node = READER.readTree(text);
    } catch (JsonProcessingException e) {
      throw new NotJson(e.getOriginalMessage());
    }
    if (node == null || node.isMissingNode()) {
      throw new NotJson("no JSON value");
    }
    checkValues(node);
    return node;
  }

  /** Lone surrogates (in values and member names) and numbers a double cannot hold. */
  private static void checkValues(JsonNode root) throws NotJson {
    Deque<JsonNode> todo = new ArrayDeque<>();
    todo.push(root);
    while (!todo.isEmpty()) {
      JsonNode node = todo.pop();
      if (node.isTextual()) {
        checkText(node.textValue());
      } else if (node.isBigDecimal()) {
        BigDecimal number = node.decimalValue();
        if (Double.isInfinite(number.doubleValue())) {
          throw new NotJson("a number overflowing a double: " + number);
        }
      } else if (node.isObject()) {
        for (Map.Entry<String, JsonNode> member : node.properties()) {
          checkText(member.getKey());
          todo.push(member.getValue());
        }
      } else if (node.isArray()) {
        node.forEach(todo::push);
      }
    }
  }

  private static void checkText(String text) throws NotJson {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c)
          && i + 1 < text.length()
          && Character.isLowSurrogate(text.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        throw new NotJson("a lone surrogate");
      }
    }
  }
}
