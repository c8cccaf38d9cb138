package spectral.interop;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.math.BigInteger;
import java.util.HexFormat;
import net.openhft.hashing.LongTupleHashFunction;

/** Section 4 of the spec: the canonical form of a failure-cluster payload and its hash. */
final class SnapshotHash {
  static final BigInteger MAX_SAFE = BigInteger.valueOf((1L << 53) - 1);
  static final int MAX_DEPTH = 64;
  private static final LongTupleHashFunction XXH3_128 = LongTupleHashFunction.xx128();

  private SnapshotHash() {}

  /** A payload that cannot be hashed: the reason invalid_payload, with why. */
  static final class Unhashable extends Exception {
    private static final long serialVersionUID = 1L;

    Unhashable(String why) {
      super(why);
    }
  }

  /** Step 2 and 3: the canonical bytes of the payload without cluster_id and snapshot_hash. */
  static byte[] canonical(ObjectNode payload) throws Unhashable {
    ObjectNode body = payload.deepCopy();
    body.remove("cluster_id");
    body.remove("snapshot_hash");
    return canonicalValue(body);
  }

  /** The canonical bytes of any object the contract hashes. */
  static byte[] canonicalValue(ObjectNode body) throws Unhashable {
    check(body, 1, "payload");
    try {
      return StrictJson.CANONICAL.writeValueAsBytes(body);
    } catch (JsonProcessingException e) {
      throw new Unhashable(e.getOriginalMessage());
    }
  }

  /** Step 4: XXH3-128 of the canonical bytes, 32 lowercase hex digits, high 64 bits first. */
  static String hash(ObjectNode payload) throws Unhashable {
    return hex(canonical(payload));
  }

  static String hex(byte[] canonical) {
    long[] halves = XXH3_128.hashBytes(canonical); // {low 64 bits, high 64 bits}
    return HexFormat.of().toHexDigits(halves[1]) + HexFormat.of().toHexDigits(halves[0]);
  }

  /** Integers only, within +/-(2^53 - 1); at most 64 levels of objects and arrays. */
  private static void check(JsonNode node, int depth, String path) throws Unhashable {
    if (node.isContainerNode()) {
      if (depth > MAX_DEPTH) {
        throw new Unhashable(path + ": nested more than " + MAX_DEPTH + " levels deep");
      }
      int index = 0;
      if (node.isArray()) {
        for (JsonNode item : node) {
          check(item, depth + 1, path + "[" + index++ + "]");
        }
      } else {
        for (var member : node.properties()) {
          if (member.getKey().indexOf('\u0000') >= 0) {
            throw new Unhashable(path + ": a member name holds U+0000");
          }
          check(member.getValue(), depth + 1, path + "." + member.getKey());
        }
      }
    } else if (node.isTextual() && node.textValue().indexOf('\u0000') >= 0) {
      throw new Unhashable(path + ": a string holds U+0000");
    } else if (node.isNumber()) {
      if (!node.isIntegralNumber()) {
        throw new Unhashable(path + ": numbers in hashed payloads are integers, found " + node);
      }
      if (node.bigIntegerValue().abs().compareTo(MAX_SAFE) > 0) {
        throw new Unhashable(path + ": an integer beyond 2^53 - 1: " + node);
      }
    }
  }
}
