package spectral.interop;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.UUID;

/**
 * Failure-cluster snapshots built as sections 1 to 5 of the spec say: the payload, its hash (the
 * payload serialized, parsed back and hashed, then snapshot_hash added), the envelope, the keys.
 */
final class Events {
  static final String CLUSTERS = Reader.CLUSTERS;
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final String[] SEVERITIES = {"low", "medium", "high"};
  private static final String AWKWARD_TEXT =
      "tab\\t and a real\ttab, quote \" backslash \\\\ slash /, control \u001f, DEL \u007f, "
          + "LS \u2028 PS \u2029, NEL \u0085, BOM \ufeff, emoji \ud83d\ude00, "
          + "שלום, e\u0301, 漢字";

  private Events() {}

  /** One record as section 5 says: key, value and the two headers. */
  record Snapshot(
      String clusterId, String snapshotHash, String idempotencyKey, byte[] key, byte[] value) {}

  /**
   * The n-th snapshot of a corpus: varied severities, counts (2^53 - 1 included), evidence (0 to
   * 10 items), text that is awkward to escape, unknown fields whose names sort differently as
   * UTF-16 and as code points; ``padTo`` pads the payload so the value is that many bytes.
   */
  static Snapshot snapshot(int n, String tag, Instant now, int padTo) {
    String clusterId = UUID.randomUUID().toString();
    ObjectNode payload = NODES.objectNode();
    payload.put("cluster_id", clusterId);
    payload.put("rule_id", UUID.randomUUID().toString());
    payload.put("workspace_id", UUID.randomUUID().toString());
    payload.put("severity", SEVERITIES[n % 3]);
    payload.put("failure_count", n == 1 ? (1L << 53) - 1 : n);
    payload.put("first_observed_at", Timestamps.write(now.minus(Duration.ofMinutes(n))));
    payload.put("last_observed_at", Timestamps.write(now));
    ArrayNode evidence = payload.putArray("evidence_bundle");
    for (int i = 0; i < n % 11; i++) {
      ObjectNode item = evidence.addObject();
      item.put("failure_id", tag + "-" + n + "-" + i);
      item.put("observed_at", Timestamps.write(now.minusSeconds(i)));
      item.put("summary", i == 0 ? AWKWARD_TEXT : "failure " + i + " of " + tag);
    }
    if (n % 2 == 0) {
      payload.putNull("suggested_rule_stub");
    } else {
      payload.put("suggested_rule_stub", "deny if " + AWKWARD_TEXT);
    }
    ObjectNode probe = payload.putObject("java_probe"); // unknown fields are kept and hashed
    probe.put("\ue000", 1);
    probe.put("\ud83d\ude00", 2);
    probe.putArray("values").add(-((1L << 53) - 1)).add(0).addNull().add(true).add("x");
    if (padTo > 0) {
      payload.put("padding", "");
      int size = envelope(payload, clusterId, "0".repeat(32)).length;
      payload.put("padding", "p".repeat(padTo - size));
    }
    String hash = hashAsWritten(payload);
    payload.put("snapshot_hash", hash);
    String idempotencyKey = clusterId + ":" + hash;
    byte[] value = envelope(payload, clusterId, hash);
    return new Snapshot(
        clusterId, hash, idempotencyKey, clusterId.getBytes(StandardCharsets.UTF_8), value);
  }

  /** The recommended way: serialize, parse back, hash what was parsed. */
  private static String hashAsWritten(ObjectNode payload) {
    try {
      byte[] written = StrictJson.WRITER.writeValueAsBytes(payload);
      return SnapshotHash.hash((ObjectNode) StrictJson.parse(written));
    } catch (JsonProcessingException | StrictJson.NotJson | SnapshotHash.Unhashable e) {
      throw new IllegalStateException("this producer built a payload it cannot hash", e);
    }
  }

  private static byte[] envelope(ObjectNode payload, String clusterId, String hash) {
    ObjectNode envelope = NODES.objectNode();
    envelope.put("event_id", UUID.randomUUID().toString());
    envelope.put("event_type", CLUSTERS);
    envelope.put("schema_version", 1);
    envelope.put("source", "java-interop"); // informational: any producer may name itself
    envelope.put("target", "platform");
    envelope.put("occurred_at", Timestamps.write(Instant.now()));
    envelope.put("idempotency_key", clusterId + ":" + hash);
    envelope.putNull("correlation_id");
    envelope.putNull("causation_id");
    envelope.set("payload", payload);
    try {
      return StrictJson.WRITER.writeValueAsBytes(envelope);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}
