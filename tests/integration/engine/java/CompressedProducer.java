// A producer that is not spectral's: Kafka's own Java client (the jars of the local stack),
// sending the records of each file with its compression codec (a producer of its own per codec).
// Usage: java -cp 'libs/*' CompressedProducer.java BOOTSTRAP TOPIC CODEC FILE [CODEC FILE ...]
// FILE: one record per line, "key<TAB>value" (UTF-8).

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class CompressedProducer {
    public static void main(String[] args) throws Exception {
        if (args.length < 4 || args.length % 2 != 0) {
            throw new IllegalArgumentException("BOOTSTRAP TOPIC CODEC FILE [CODEC FILE ...]");
        }
        for (int i = 2; i + 1 < args.length; i += 2) {
            send(args[0], args[1], args[i], Path.of(args[i + 1]));
        }
    }

    private static void send(String bootstrap, String topic, String codec, Path file)
            throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("compression.type", codec);
        props.put("acks", "all");
        props.put("linger.ms", "50");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        List<String> lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (String line : lines) {
                String[] parts = line.split("\t", 2);
                producer.send(new ProducerRecord<>(
                    topic, parts[0].getBytes(StandardCharsets.UTF_8),
                    parts[1].getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
        }
    }
}
