// A producer of spectral events written from the published contract alone
// (schemas/events/README.md, the JSON Schemas and the vectors beside it), with franz-go.
//
//	interop vectors -vectors schemas/events/vectors
//	    check this implementation against the vectors: canonical form and hash of every
//	    snapshot_hash vector, hash and keys of every record vector, the written form of every
//	    valid timestamp vector; exits 1 on the first disagreement.
//	interop publish -brokers host:port -topic T -per-codec N -manifest FILE
//	    publish N fresh failure-cluster snapshots with each codec (none, gzip, snappy, lz4,
//	    zstd) and write what was published (JSON lines) to FILE.
//	interop publish-vectors -brokers host:port -topic T -vectors schemas/events/vectors
//	    publish every record vector of T's event type (valid and refused ones) as it is,
//	    key and value byte for byte, zstd-compressed.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: interop vectors|publish|publish-vectors [flags]")
	}
	var err error
	switch os.Args[1] {
	case "vectors":
		err = runVectors(os.Args[2:])
	case "publish":
		err = runPublish(os.Args[2:])
	case "publish-vectors":
		err = runPublishVectors(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(1)
}

// ---- vectors ---------------------------------------------------------------------------

func readJSON(path string) (any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeJSON(data)
}

func runVectors(args []string) error {
	flags := flag.NewFlagSet("vectors", flag.ExitOnError)
	dir := flags.String("vectors", "schemas/events/vectors", "the vectors folder")
	_ = flags.Parse(args)
	checked := 0

	hashes, err := readJSON(filepath.Join(*dir, "snapshot_hash.json"))
	if err != nil {
		return err
	}
	for _, item := range hashes.([]any) {
		v := item.(map[string]any)
		payload := v["payload"].(map[string]any)
		body := map[string]any{}
		for key, value := range payload {
			if key != "cluster_id" && key != "snapshot_hash" {
				body[key] = value
			}
		}
		text, err := canonical(body)
		if err != nil {
			return fmt.Errorf("%s: %v", v["name"], err)
		}
		if string(text) != v["canonical"] {
			return fmt.Errorf("%s: canonical form differs:\n%s\n%s", v["name"], text, v["canonical"])
		}
		if hash, _ := snapshotHash(payload); hash != v["snapshot_hash"] {
			return fmt.Errorf("%s: hash %s, the vector says %s", v["name"], hash, v["snapshot_hash"])
		}
		checked++
	}

	envelopes, err := readJSON(filepath.Join(*dir, "envelopes.json"))
	if err != nil {
		return err
	}
	for _, item := range envelopes.(map[string]any)["records"].([]any) {
		v := item.(map[string]any)
		ok, err := checkRecordVector(v)
		if err != nil {
			return fmt.Errorf("%s: %v", v["name"], err)
		}
		if ok {
			checked++
		}
	}

	stamps, err := readJSON(filepath.Join(*dir, "timestamps.json"))
	if err != nil {
		return err
	}
	for _, item := range stamps.([]any) {
		v := item.(map[string]any)
		if v["valid"] != true {
			continue
		}
		text := strings.ToUpper(v["text"].(string)) // the spec accepts t and z
		parsed, err := time.Parse(time.RFC3339Nano, text)
		if err != nil {
			return fmt.Errorf("timestamp %s: %v", v["text"], err)
		}
		if written := timestamp(parsed); written != v["utc"] {
			return fmt.Errorf("timestamp %s is written %s, the vector says %s", v["text"], written, v["utc"])
		}
		checked++
	}
	fmt.Printf("%d vectors agree\n", checked)
	return nil
}

// checkRecordVector recomputes what a producer computes (hash, idempotency key, record key) for
// the record vectors where that decides the verdict; true when it checked something.
func checkRecordVector(v map[string]any) (bool, error) {
	expect := v["expect"].(string)
	switch expect {
	case "valid", "hash_mismatch", "key_mismatch", "record_key_mismatch":
	default:
		return false, nil
	}
	value, err := decodeJSON([]byte(v["value"].(string)))
	if err != nil {
		return false, err
	}
	envelope := value.(map[string]any)
	hashOK := true
	if envelope["event_type"] == clusterType {
		payload := envelope["payload"].(map[string]any)
		hash, err := snapshotHash(payload)
		if err != nil {
			return false, err
		}
		hashOK = hash == payload["snapshot_hash"]
	}
	idem, recordKey, err := keys(envelope)
	if err != nil {
		return false, err
	}
	idemOK := idem == envelope["idempotency_key"]
	key, err := vectorKey(v)
	if err != nil {
		return false, err
	}
	recordOK := key != nil && string(key) == recordKey
	got := "valid"
	switch {
	case !hashOK:
		got = "hash_mismatch"
	case !idemOK:
		got = "key_mismatch"
	case !recordOK:
		got = "record_key_mismatch"
	}
	if got != expect {
		return false, fmt.Errorf("this producer computes %s, the vector says %s", got, expect)
	}
	return true, nil
}

// vectorKey is a record vector's key: the UTF-8 bytes of "key", the bytes of "key_base64" (a key
// that is not UTF-8), or nil for a null key (an empty key is empty, not nil).
func vectorKey(v map[string]any) ([]byte, error) {
	if encoded, ok := v["key_base64"].(string); ok {
		return base64.StdEncoding.DecodeString(encoded)
	}
	k, ok := v["key"].(string)
	if !ok {
		return nil, nil
	}
	return append([]byte{}, k...), nil
}

// ---- publishing ------------------------------------------------------------------------

func client(brokers string, codec kgo.CompressionCodec) (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ProducerBatchCompression(codec),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), // murmur2, as section 5 asks
		kgo.ProducerBatchMaxBytes(1114112), // section 5: the topics' max.message.bytes
		kgo.AllowAutoTopicCreation(),
	)
}

func headers(eventType, idempotencyKey string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "event_type", Value: []byte(eventType)},
		{Key: "idempotency_key", Value: []byte(idempotencyKey)},
	}
}

func produce(brokers string, codec kgo.CompressionCodec, records []*kgo.Record) error {
	cl, err := client(brokers, codec)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return cl.ProduceSync(ctx, records...).FirstErr()
}

func runPublish(args []string) error {
	flags := flag.NewFlagSet("publish", flag.ExitOnError)
	brokers := flags.String("brokers", "", "bootstrap brokers")
	topic := flags.String("topic", "", "the topic of platform.failure_cluster.detected")
	perCodec := flags.Int("per-codec", 20, "snapshots published with each codec")
	manifest := flags.String("manifest", "", "where to write what was published (JSON lines)")
	_ = flags.Parse(args)
	out, err := os.Create(*manifest)
	if err != nil {
		return err
	}
	defer out.Close()
	now := time.Now()
	for _, c := range codecs {
		var batch []*kgo.Record
		for n := 1; n <= *perCodec; n++ {
			r, err := clusterEvent(n, c.name, now)
			if err != nil {
				return err
			}
			batch = append(batch, &kgo.Record{
				Topic: *topic, Key: r.Key, Value: r.Value, Headers: headers(r.EventType, r.IdempotencyKey),
			})
			line, _ := json.Marshal(map[string]any{
				"codec": c.name, "cluster_id": r.ClusterID, "snapshot_hash": r.SnapshotHash,
				"idempotency_key": r.IdempotencyKey, "bytes": len(r.Value),
			})
			fmt.Fprintln(out, string(line))
		}
		if err := produce(*brokers, c.codec, batch); err != nil {
			return fmt.Errorf("codec %s: %v", c.name, err)
		}
	}
	fmt.Printf("published %d snapshots with each of %d codecs\n", *perCodec, len(codecs))
	return nil
}

func runPublishVectors(args []string) error {
	flags := flag.NewFlagSet("publish-vectors", flag.ExitOnError)
	brokers := flags.String("brokers", "", "bootstrap brokers")
	topic := flags.String("topic", "", "the topic to publish to")
	eventType := flags.String("event-type", clusterType, "publish the vectors of this topic")
	dir := flags.String("vectors", "schemas/events/vectors", "the vectors folder")
	_ = flags.Parse(args)
	vectors, err := readJSON(filepath.Join(*dir, "envelopes.json"))
	if err != nil {
		return err
	}
	var batch []*kgo.Record
	all := vectors.(map[string]any)
	items := append(all["records"].([]any), all["sized_records"].([]any)...)
	for _, item := range items {
		v := item.(map[string]any)
		if v["topic_event_type"] != *eventType {
			continue
		}
		var value []byte // nil: no value (a tombstone)
		raw, hasValue := v["value"]
		switch {
		case hasValue && raw == nil:
		case v["value_base64"] != nil:
			value, err = base64.StdEncoding.DecodeString(v["value_base64"].(string))
			if err != nil {
				return err
			}
		case v["value"] != nil:
			value = []byte(v["value"].(string))
		default:
			prefix, suffix := v["value_prefix"].(string), v["value_suffix"].(string)
			total, _ := v["total_bytes"].(json.Number).Int64()
			fill := strings.Repeat(v["filler"].(string), int(total)-len(prefix)-len(suffix))
			value = []byte(prefix + fill + suffix)
		}
		key, err := vectorKey(v)
		if err != nil {
			return err
		}
		batch = append(batch, &kgo.Record{
			Topic: *topic, Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: "vector", Value: []byte(v["name"].(string))}},
		})
	}
	if err := produce(*brokers, kgo.ZstdCompression(), batch); err != nil {
		return err
	}
	fmt.Printf("published %d record vectors\n", len(batch))
	return nil
}
