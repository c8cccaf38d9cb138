package spectral.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A producer of spectral events written from the published contract alone (schemas/events:
 * README.md, the JSON Schemas and the vectors), with kafka-clients and Jackson.
 *
 * <pre>
 * interop vectors --vectors schemas/events/vectors [--schemas schemas/events]
 *     every vector of every file through this implementation: the canonical form and hash of
 *     each snapshot_hash vector, the refusal of each snapshot_hash_invalid one, the reading of
 *     each timestamp, and the verdict (and idempotency_key) of each record vector by this
 *     reader; prints "N vectors agree", or every disagreement and exits 1.
 * interop publish --brokers B --topic T --per-codec N --manifest FILE
 *     N fresh failure-cluster snapshots with each codec (none, gzip, snappy, lz4, zstd), plus
 *     one whose value is just under 1 MiB per codec; what was published goes to FILE (JSON
 *     lines).
 * interop publish-vectors --brokers B --topic T --vectors DIR [--event-type E] [--only NAME]
 *     [--max-request-size BYTES]
 *     every record vector of E's topic (valid and refused) as it is, key and value byte for
 *     byte, with a "vector" header naming it (lz4); exits 1 if the client refuses any.
 * </pre>
 */
public final class Main {
  static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");

  /** The request limit section 5 asks for: the topics' max.message.bytes. */
  static final int MAX_REQUEST_BYTES = 1114112;

  /** The corpus's large records: a value this many bytes long, under the 1 MiB limit. */
  static final int LARGE_VALUE_BYTES = 1024 * 1024 - 512;

  private Main() {}

  /**
   * The stack the work runs on: JSON Schema validators (networknt's included) recurse once or
   * more per level, and a record may nest 1,024 levels; the default stack overflows near 400.
   */
  static final long STACK_BYTES = 64L << 20;

  public static void main(String[] args) throws Exception {
    Throwable[] failure = new Throwable[1];
    Thread worker =
        new Thread(
            null,
            () -> {
              try {
                run(args);
              } catch (Exception | StackOverflowError e) {
                failure[0] = e;
              }
            },
            "interop",
            STACK_BYTES);
    worker.start();
    worker.join();
    if (failure[0] != null) {
      failure[0].printStackTrace();
      System.exit(1);
    }
  }

  private static void run(String[] args) throws Exception {
    if (args.length == 0) {
      fail("usage: interop vectors|publish|publish-vectors [--flag value ...]");
    }
    Map<String, String> flags = flags(Arrays.copyOfRange(args, 1, args.length));
    switch (args[0]) {
      case "vectors" -> vectors(flags);
      case "publish" -> publish(flags);
      case "publish-vectors" -> publishVectors(flags);
      default -> fail("unknown command " + args[0]);
    }
  }

  private static Map<String, String> flags(String[] args) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) {
        fail("expected --flag value, got " + args[i]);
      }
      out.put(args[i].substring(2), args[i + 1]);
    }
    return out;
  }

  private static String flag(Map<String, String> flags, String name) {
    String value = flags.get(name);
    if (value == null) {
      fail("--" + name + " is required");
    }
    return value;
  }

  private static void fail(String message) {
    System.err.println(message);
    System.exit(1);
  }

  private static JsonNode readJson(Path path) throws IOException {
    return StrictJson.READER.readTree(Files.readString(path));
  }

  // ---- vectors ------------------------------------------------------------------------------

  private static void vectors(Map<String, String> flags) throws Exception {
    Path dir = Path.of(flag(flags, "vectors"));
    Path schemas = flags.containsKey("schemas") ? Path.of(flags.get("schemas")) : dir.toAbsolutePath().getParent();
    Reader reader = new Reader(schemas);
    List<String> wrong = new ArrayList<>();
    int checked = 0;

    for (JsonNode v : readJson(dir.resolve("snapshot_hash.json"))) {
      checked++;
      byte[] canonical = SnapshotHash.canonical((ObjectNode) v.get("payload"));
      byte[] expected = v.get("canonical").textValue().getBytes(StandardCharsets.UTF_8);
      if (!Arrays.equals(canonical, expected)) {
        wrong.add(name(v) + ": canonical form " + new String(canonical, StandardCharsets.UTF_8));
      } else if (!SnapshotHash.hex(canonical).equals(v.get("snapshot_hash").textValue())) {
        wrong.add(name(v) + ": hash " + SnapshotHash.hex(canonical));
      }
    }
    for (JsonNode v : readJson(dir.resolve("snapshot_hash_invalid.json"))) {
      checked++;
      String got = hashRefusal(v.get("payload_text").textValue());
      if (!got.equals(v.get("reason").textValue())) {
        wrong.add(name(v) + ": " + got + ", the vector says " + v.get("reason").textValue());
      }
    }
    for (JsonNode v : readJson(dir.resolve("timestamps.json"))) {
      checked++;
      String text = v.get("text").textValue();
      String got;
      try {
        got = Timestamps.write(Timestamps.parse(text));
      } catch (IllegalArgumentException e) {
        got = null;
      }
      boolean valid = v.get("valid").booleanValue();
      if (valid ? !v.get("utc").textValue().equals(got) : got != null) {
        wrong.add("timestamp " + text + ": read as " + got);
      }
    }
    JsonNode envelopes = readJson(dir.resolve("envelopes.json"));
    List<JsonNode> records = new ArrayList<>();
    envelopes.get("records").forEach(records::add);
    envelopes.get("sized_records").forEach(records::add);
    for (JsonNode v : records) {
      checked++;
      Reader.Outcome got = reader.read(v.get("topic_event_type").textValue(), key(v), value(v));
      String expect = v.get("expect").textValue();
      if (!got.reason().equals(expect)) {
        wrong.add(name(v) + ": " + got.reason() + ", the vector says " + expect);
      } else if (v.has("idempotency_key")
          && !v.get("idempotency_key").textValue().equals(got.idempotencyKey())) {
        wrong.add(name(v) + ": idempotency_key " + got.idempotencyKey());
      }
    }
    if (!wrong.isEmpty()) {
      wrong.forEach(System.err::println);
      fail(wrong.size() + " of " + checked + " vectors disagree");
    }
    System.out.println(checked + " vectors agree");
  }

  private static String name(JsonNode vector) {
    return vector.path("name").asText("?");
  }

  /** What the hasher makes of a payload text: "valid" or the reason it refuses it. */
  private static String hashRefusal(String text) {
    JsonNode payload;
    try {
      payload = StrictJson.parse(text.getBytes(StandardCharsets.UTF_8));
    } catch (StrictJson.NotJson e) {
      return "not_json";
    }
    if (!payload.isObject()) {
      return "not_an_object";
    }
    try {
      SnapshotHash.canonical((ObjectNode) payload);
      return "valid";
    } catch (SnapshotHash.Unhashable e) {
      return "invalid_payload";
    }
  }

  /** A record vector's key: UTF-8 of "key", the bytes of "key_base64", or null. */
  static byte[] key(JsonNode vector) {
    if (vector.has("key_base64")) {
      return Base64.getDecoder().decode(vector.get("key_base64").textValue());
    }
    JsonNode key = vector.get("key");
    return key.isNull() ? null : key.textValue().getBytes(StandardCharsets.UTF_8);
  }

  /** A record vector's value: "value" (null: a tombstone), "value_base64", or the sized form. */
  static byte[] value(JsonNode vector) {
    if (vector.has("value_base64")) {
      return Base64.getDecoder().decode(vector.get("value_base64").textValue());
    }
    if (vector.has("value")) {
      JsonNode value = vector.get("value");
      return value.isNull() ? null : value.textValue().getBytes(StandardCharsets.UTF_8);
    }
    byte[] prefix = vector.get("value_prefix").textValue().getBytes(StandardCharsets.UTF_8);
    byte[] suffix = vector.get("value_suffix").textValue().getBytes(StandardCharsets.UTF_8);
    byte[] filler = vector.get("filler").textValue().getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[vector.get("total_bytes").intValue()];
    System.arraycopy(prefix, 0, out, 0, prefix.length);
    for (int at = prefix.length; at < out.length - suffix.length; at += filler.length) {
      System.arraycopy(filler, 0, out, at, filler.length);
    }
    System.arraycopy(suffix, 0, out, out.length - suffix.length, suffix.length);
    return out;
  }

  // ---- publishing ---------------------------------------------------------------------------

  /** Section 5's producer settings. */
  static KafkaProducer<byte[], byte[]> producer(String brokers, String codec, int maxRequest) {
    Properties config = new Properties();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    config.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, maxRequest);
    config.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
    config.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    return new KafkaProducer<>(config);
  }

  private static void publish(Map<String, String> flags) throws Exception {
    String brokers = flag(flags, "brokers");
    String topic = flag(flags, "topic");
    int perCodec = Integer.parseInt(flag(flags, "per-codec"));
    Instant now = Instant.now();
    int published = 0;
    try (PrintWriter manifest =
        new PrintWriter(Files.newBufferedWriter(Path.of(flag(flags, "manifest"))))) {
      for (String codec : CODECS) {
        try (KafkaProducer<byte[], byte[]> producer = producer(brokers, codec, MAX_REQUEST_BYTES)) {
          List<Future<RecordMetadata>> sent = new ArrayList<>();
          for (int n = 1; n <= perCodec + 1; n++) {
            int padTo = n > perCodec ? LARGE_VALUE_BYTES : 0;
            Events.Snapshot s = Events.snapshot(n, "java-" + codec, now, padTo);
            RecordHeaders headers = new RecordHeaders();
            headers.add("event_type", Events.CLUSTERS.getBytes(StandardCharsets.UTF_8));
            headers.add("idempotency_key", s.idempotencyKey().getBytes(StandardCharsets.UTF_8));
            sent.add(producer.send(new ProducerRecord<>(topic, null, s.key(), s.value(), headers)));
            ObjectNode line = StrictJson.WRITER.createObjectNode();
            line.put("codec", codec);
            line.put("cluster_id", s.clusterId());
            line.put("snapshot_hash", s.snapshotHash());
            line.put("idempotency_key", s.idempotencyKey());
            line.put("bytes", s.value().length);
            manifest.println(StrictJson.WRITER.writeValueAsString(line));
          }
          for (Future<RecordMetadata> ack : sent) {
            ack.get();
            published++;
          }
        }
      }
    }
    System.out.println("published " + published + " snapshots, " + CODECS.size() + " codecs");
  }

  private static void publishVectors(Map<String, String> flags) throws Exception {
    String topic = flag(flags, "topic");
    String eventType = flags.getOrDefault("event-type", Events.CLUSTERS);
    String only = flags.get("only");
    int maxRequest = Integer.parseInt(flags.getOrDefault("max-request-size", "" + MAX_REQUEST_BYTES));
    JsonNode envelopes = readJson(Path.of(flag(flags, "vectors")).resolve("envelopes.json"));
    List<JsonNode> records = new ArrayList<>();
    envelopes.get("records").forEach(records::add);
    envelopes.get("sized_records").forEach(records::add);
    Map<String, Future<RecordMetadata>> sent = new HashMap<>();
    try (KafkaProducer<byte[], byte[]> producer =
        producer(flag(flags, "brokers"), "lz4", maxRequest)) {
      for (JsonNode v : records) {
        if (!eventType.equals(v.get("topic_event_type").textValue())
            || (only != null && !only.equals(name(v)))) {
          continue;
        }
        RecordHeaders headers = new RecordHeaders();
        headers.add("vector", name(v).getBytes(StandardCharsets.UTF_8));
        sent.put(name(v), producer.send(new ProducerRecord<>(topic, null, key(v), value(v), headers)));
      }
      List<String> refused = new ArrayList<>();
      for (var ack : sent.entrySet()) {
        try {
          ack.getValue().get();
        } catch (ExecutionException e) {
          refused.add(ack.getKey() + ": " + e.getCause().getClass().getSimpleName());
        }
      }
      if (!refused.isEmpty()) {
        refused.forEach(System.err::println);
        fail("the client refused " + refused.size() + " of " + sent.size() + " record vectors");
      }
    }
    System.out.println("published " + sent.size() + " record vectors");
  }
}
