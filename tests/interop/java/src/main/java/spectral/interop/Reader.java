package spectral.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.networknt.schema.JsonNodePath;
import com.networknt.schema.JsonSchema;
import com.networknt.schema.JsonSchemaFactory;
import com.networknt.schema.SchemaValidatorsConfig;
import com.networknt.schema.SpecVersion;
import com.networknt.schema.ValidationMessage;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Section 6 of the spec: reading one Kafka record, the first failing step is the reason. The
 * envelope and payload rules are the published JSON Schemas' plus the table "Rules JSON Schema
 * cannot express"; keys are section 3's table.
 */
final class Reader {
  static final int MAX_RECORD_BYTES = 1024 * 1024;
  static final String CLUSTERS = "platform.failure_cluster.detected";

  /** Section 3: each type's idempotency_key and record key, as templates over the payload. */
  static final Map<String, String> IDEMPOTENCY_KEYS =
      Map.of(
          CLUSTERS, "{cluster_id}:{snapshot_hash}",
          "work.thread.opened", "{thread_id}",
          "work.item.enqueued", "{work_item_id}:{attempt}",
          "work.item.state_changed", "{work_item_id}:{status}:{attempt}",
          "work.ledger.entry_appended", "{entry_id}");

  static final Map<String, String> RECORD_KEYS =
      Map.of(
          CLUSTERS, "{cluster_id}",
          "work.thread.opened", "{thread_id}",
          "work.item.enqueued", "{lock_scope}",
          "work.item.state_changed", "{lock_scope}",
          "work.ledger.entry_appended", "{thread_id}");

  /** Section 2: the payload members that are timestamps ("observed_at" of each evidence item). */
  static final Map<String, List<String>> PAYLOAD_TIMESTAMPS =
      Map.of(
          CLUSTERS, List.of("first_observed_at", "last_observed_at"),
          "work.item.enqueued", List.of("not_before"));

  private static final Pattern MEMBER = Pattern.compile("\\{(\\w+)\\}");
  private static final Pattern SCHEMA_FILE = Pattern.compile("(.+)\\.v([0-9]+)\\.json");

  private record Schema(JsonSchema validator, JsonNode document) {}

  private final Map<String, Schema> schemas = new HashMap<>();

  /** The newest version of each type's JSON Schema in ``dir``. */
  Reader(Path dir) throws IOException {
    JsonSchemaFactory factory = JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012);
    SchemaValidatorsConfig config =
        SchemaValidatorsConfig.builder().formatAssertionsEnabled(false).build();
    Map<String, Integer> versions = new HashMap<>();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path file : files.sorted().toList()) {
        Matcher name = SCHEMA_FILE.matcher(file.getFileName().toString());
        if (!name.matches()) {
          continue;
        }
        int version = Integer.parseInt(name.group(2));
        if (versions.getOrDefault(name.group(1), 0) >= version) {
          continue;
        }
        JsonNode document = StrictJson.READER.readTree(Files.readString(file));
        ((ObjectNode) document).remove("$id"); // a relative $id: the validator needs none
        versions.put(name.group(1), version);
        schemas.put(name.group(1), new Schema(factory.getSchema(document, config), document));
      }
    }
  }

  /** A record's verdict on the topic of ``topicType``: "valid", or the reason it is refused. */
  String verdict(String topicType, byte[] key, byte[] value) {
    return read(topicType, key, value).reason;
  }

  /** What reading a record gives: the reason ("valid" when accepted) and its keys. */
  record Outcome(String reason, String idempotencyKey) {}

  Outcome read(String topicType, byte[] key, byte[] value) {
    if (value == null) {
      return refused("not_json"); // a tombstone carries no event
    }
    if (value.length > MAX_RECORD_BYTES) {
      return refused("too_large");
    }
    JsonNode record;
    try {
      record = StrictJson.parse(value);
    } catch (StrictJson.NotJson e) {
      return refused("not_json");
    }
    if (!record.isObject()) {
      return refused("not_an_object");
    }
    JsonNode type = record.get("event_type");
    if (type == null || !type.isTextual()) {
      return refused("invalid_envelope");
    }
    String eventType = type.textValue();
    Schema schema = schemas.get(eventType);
    if (schema == null) {
      return refused("unknown_event_type");
    }
    String broken = brokenRules(eventType, schema, record);
    if (broken != null) {
      return refused(broken);
    }
    ObjectNode payload = (ObjectNode) record.get("payload");
    if (CLUSTERS.equals(eventType)) {
      try {
        if (!SnapshotHash.hash(payload).equals(payload.get("snapshot_hash").textValue())) {
          return refused("hash_mismatch");
        }
      } catch (SnapshotHash.Unhashable e) {
        return refused("invalid_payload");
      }
    }
    String idempotencyKey = render(IDEMPOTENCY_KEYS.get(eventType), payload);
    if (!idempotencyKey.equals(record.get("idempotency_key").textValue())) {
      return refused("key_mismatch");
    }
    byte[] recordKey = render(RECORD_KEYS.get(eventType), payload).getBytes(StandardCharsets.UTF_8);
    if (key == null || !Arrays.equals(key, recordKey)) {
      return refused("record_key_mismatch");
    }
    if (!eventType.equals(topicType)) {
      return refused("unexpected_event_type");
    }
    return new Outcome("valid", idempotencyKey);
  }

  private static Outcome refused(String reason) {
    return new Outcome(reason, null);
  }

  /**
   * invalid_envelope or invalid_payload (an envelope error wins), or null: the schema's errors,
   * placed by where they are (a payload that is not an object is the envelope's error), then
   * the rules the schema cannot say.
   */
  private static String brokenRules(String eventType, Schema schema, JsonNode record) {
    boolean envelope = false;
    boolean payload = false;
    for (ValidationMessage error : schema.validator().validate(record)) {
      JsonNodePath at = error.getInstanceLocation();
      boolean inPayload = at.getNameCount() >= 1 && "payload".equals(at.getName(0));
      boolean payloadItself = at.getNameCount() == 1 && "type".equals(error.getType());
      if (inPayload && !payloadItself) {
        payload = true;
      } else {
        envelope = true;
      }
    }
    envelope |= !integralWhereIntegers(record, schema.document().get("properties"));
    envelope |= !inBound(record.get("occurred_at"));
    if (envelope) {
      return "invalid_envelope";
    }
    if (payload) {
      return "invalid_payload";
    }
    JsonNode body = record.get("payload");
    String definition = schema.document().at("/properties/payload/$ref").textValue();
    JsonNode payloadSchema = schema.document().at(definition.substring(1));
    List<JsonNode> stamps = new ArrayList<>();
    PAYLOAD_TIMESTAMPS.getOrDefault(eventType, List.of()).forEach(name -> stamps.add(body.get(name)));
    if (CLUSTERS.equals(eventType)) {
      body.get("evidence_bundle").forEach(item -> stamps.add(item.get("observed_at")));
      try {
        SnapshotHash.canonical((ObjectNode) body); // integers only, 64 levels
      } catch (SnapshotHash.Unhashable e) {
        return "invalid_payload";
      }
    }
    if (!integralWhereIntegers(body, payloadSchema.get("properties"))
        || !stamps.stream().allMatch(Reader::inBound)) {
      return "invalid_payload";
    }
    if (CLUSTERS.equals(eventType)) {
      Instant first = Timestamps.parse(body.get("first_observed_at").textValue());
      Instant last = Timestamps.parse(body.get("last_observed_at").textValue());
      if (first.isAfter(last)) {
        return "invalid_payload";
      }
    }
    return null;
  }

  /** Integers written without a fraction or an exponent, where the schema says integer. */
  private static boolean integralWhereIntegers(JsonNode object, JsonNode properties) {
    for (var property : properties.properties()) {
      JsonNode value = object.get(property.getKey());
      boolean integer = "integer".equals(property.getValue().path("type").textValue());
      if (integer && value != null && value.isNumber() && !value.isIntegralNumber()) {
        return false;
      }
    }
    return true;
  }

  private static boolean inBound(JsonNode stamp) {
    if (stamp == null || !stamp.isTextual()) {
      return true; // the schema has said so already
    }
    try {
      Timestamps.parse(stamp.textValue());
      return true;
    } catch (IllegalArgumentException e) {
      return false;
    }
  }

  /** A key template of section 3 filled from the payload's members as written. */
  static String render(String template, JsonNode payload) {
    Matcher member = MEMBER.matcher(template);
    StringBuilder out = new StringBuilder();
    while (member.find()) {
      JsonNode value = payload.get(member.group(1));
      String text = value == null ? "" : value.isTextual() ? value.textValue() : value.toString();
      member.appendReplacement(out, Matcher.quoteReplacement(text));
    }
    member.appendTail(out);
    return out.toString();
  }
}
