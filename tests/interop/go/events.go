package main

// Building records as schemas/events/README.md says: the envelope (section 1), the failure
// cluster payload (section 2), the keys (section 3), snapshot_hash (section 4) and the Kafka
// record (section 5). Nothing here comes from spectral's Python code.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
)

const clusterType = "platform.failure_cluster.detected"

// timestamp writes a time as writers must: UTC, six fractional digits, upper-case T and Z.
func timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

// newUUID is a random (version 4) UUID in the one spelling of the contract.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// decodeJSON parses JSON text keeping numbers as json.Number (so integers stay exact).
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing content")
	}
	return value, nil
}

// marshal writes JSON without Go's HTML escaping (allowed either way; readers parse both).
func marshal(value any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(value); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// snapshotHash is section 4: drop cluster_id and snapshot_hash, canonical form, XXH3-128, hex.
func snapshotHash(payload map[string]any) (string, error) {
	body := make(map[string]any, len(payload))
	for key, value := range payload {
		if key != "cluster_id" && key != "snapshot_hash" {
			body[key] = value
		}
	}
	text, err := canonical(body)
	if err != nil {
		return "", err
	}
	sum := xxh3.Hash128(text).Bytes() // big-endian: the high 64 bits first
	return hex.EncodeToString(sum[:]), nil
}

// keys is section 3: the idempotency key and the Kafka record key of an envelope.
func keys(envelope map[string]any) (idempotencyKey, recordKey string, err error) {
	payload, ok := envelope["payload"].(map[string]any)
	if !ok {
		return "", "", fmt.Errorf("no payload object")
	}
	text := func(name string) string {
		s, _ := payload[name].(string)
		if n, isNumber := payload[name].(json.Number); isNumber {
			s = n.String()
		}
		return s
	}
	switch envelope["event_type"] {
	case clusterType:
		return text("cluster_id") + ":" + text("snapshot_hash"), text("cluster_id"), nil
	case "work.thread.opened":
		return text("thread_id"), text("thread_id"), nil
	case "work.item.enqueued":
		return text("work_item_id") + ":" + text("attempt"), text("lock_scope"), nil
	case "work.item.state_changed":
		return text("work_item_id") + ":" + text("status") + ":" + text("attempt"), text("lock_scope"), nil
	case "work.ledger.entry_appended":
		return text("entry_id"), text("thread_id"), nil
	}
	return "", "", fmt.Errorf("unknown event type %v", envelope["event_type"])
}

// record is one Kafka record as section 5 says: value, key and the two headers.
type record struct {
	Key            []byte
	Value          []byte
	EventType      string
	IdempotencyKey string
	ClusterID      string
	SnapshotHash   string
}

// clusterEvent builds a failure-cluster snapshot the way section 4 recommends: serialize the
// payload without snapshot_hash, parse that text back, hash it, add snapshot_hash.
func clusterEvent(n int, codec string, now time.Time) (record, error) {
	clusterID := newUUID()
	last := now.Add(-time.Duration(n) * time.Second)
	first := last.Add(-time.Hour)
	summaries := []string{
		"bucket acme-logs allows public read",
		"Prüfung fehlgeschlagen: café, 日本語, עברית, e\u0301, 😀🚀",
		`quotes " and backslashes \ and C:\u0000 as text`,
		"<script>&amp; are text, not HTML</script> \u2028\u2029 \x7f",
		strings.Repeat("😀", 2000),
	}
	severities := []string{"low", "medium", "high"}
	evidence := []any{}
	for i := 0; i < n%11; i++ {
		evidence = append(evidence, map[string]any{
			"failure_id":  fmt.Sprintf("go-scan-%d/finding-%d", n, i),
			"observed_at": timestamp(last.Add(-time.Duration(i) * time.Minute)),
			"summary":     summaries[(n+i)%len(summaries)],
			"go_rank":     i, // an unknown field: hashed like any other
		})
	}
	var stub any
	if n%3 == 0 {
		stub = fmt.Sprintf("rule \"go-%d\" {\n\tmatch: bucket.acl == \"public-read\"\n}\n", n)
	}
	payload := map[string]any{
		"cluster_id":          clusterID,
		"rule_id":             newUUID(),
		"workspace_id":        newUUID(),
		"severity":            severities[n%len(severities)],
		"failure_count":       json.Number(fmt.Sprint(int64(1) + int64(n)*(1<<40))),
		"first_observed_at":   first.In(time.FixedZone("", 5*3600+30*60)).Format("2006-01-02T15:04:05.000000-07:00"),
		"last_observed_at":    timestamp(last),
		"evidence_bundle":     evidence,
		"suggested_rule_stub": stub,
		"go_producer":         map[string]any{"codec": codec, "n": n},
	}
	// Serialize, parse back, hash: the hash is over exactly what is written.
	draft, err := marshal(payload)
	if err != nil {
		return record{}, err
	}
	parsed, err := decodeJSON(draft)
	if err != nil {
		return record{}, err
	}
	wire := parsed.(map[string]any)
	hash, err := snapshotHash(wire)
	if err != nil {
		return record{}, err
	}
	wire["snapshot_hash"] = hash
	envelope := map[string]any{
		"event_id":        newUUID(),
		"event_type":      clusterType,
		"schema_version":  1,
		"source":          "platform",
		"target":          "platform",
		"occurred_at":     timestamp(now),
		"idempotency_key": clusterID + ":" + hash,
		"correlation_id":  nil,
		"causation_id":    nil,
		"payload":         wire,
	}
	value, err := marshal(envelope)
	if err != nil {
		return record{}, err
	}
	if len(value) > 1<<20 {
		return record{}, fmt.Errorf("record %d is %d bytes, over the 1 MiB limit", n, len(value))
	}
	return record{
		Key:            []byte(clusterID),
		Value:          value,
		EventType:      clusterType,
		IdempotencyKey: clusterID + ":" + hash,
		ClusterID:      clusterID,
		SnapshotHash:   hash,
	}, nil
}
