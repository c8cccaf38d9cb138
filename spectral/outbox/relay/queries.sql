-- Queries of spectral/outbox/relay/repository.py: the relay side of core.outbox and its shard locks.
--
-- Shards: a record key belongs to shard (first 28 bits of md5(record_key)) % shard_count. md5 is
-- a documented, version-stable function, so every relay (and a relay in another language)
-- computes the same shard for a key. Each shard is guarded by a session advisory lock
-- (classid = the relay's lock class, objid = the shard number); only its holder reads its rows.

-- name: join_relays
-- Membership: every live relay holds the member lock in shared mode for its session's life.
SELECT pg_advisory_lock_shared($1::int, $2::int)

-- name: queue_reads
-- The relay's session reads and marks the outbox as a queue: in id order through the partial
-- index of unpublished rows, whatever the statistics say. They say little of the unpublished
-- rows (a fresh or newly emptied slot has none, and an analysed one saw a moment when few rows
-- waited), and with few expected, the planner reads every unpublished row and sorts them, or
-- marks a batch by scanning the whole slot: a backlog then costs every fetch the whole backlog,
-- and grows. With bitmap scans and sorts off, the fetch reads the rows it returns (and the rows
-- in flight it skips) and a mark probes one index entry per row. Sequential scans are off as
-- well: the delayed rows are read through the index that holds them alone (delayed_keys), which
-- the planner may cost above a scan of the slot when the statistics put much of available_at
-- in the future (after the clock went back). A plan that must sort (mark_and_fetch's last
-- step) is costed as disabled, so JIT is off as well: else that cost would make it compile its
-- few rows with LLVM (~0.8 s). Only this session is affected.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_sort = off;
SET jit = off

-- name: marks_commit_async
-- The relay session's commits do not wait for the WAL flush. The only thing it commits that
-- writes to the database is a mark (core.outbox_mark_published; its locks, its LISTEN and its
-- reads write nothing), and a mark lost to a server crash is a crash between the send and the
-- mark: the rows are published again and consumers deduplicate them. The WAL is one sequence:
-- any later commit that waits for its flush (a writer's insert, maintenance's record that a
-- slot is fully published, a slot's TRUNCATE) writes every earlier mark with it, so nothing
-- durable can act on a mark that a crash then takes back; and a crash takes back the last marks
-- only, never one while keeping a later one of the same key. A mark then costs no flush wait
-- (the WAL writer flushes it within ~3 x wal_writer_delay).
SET synchronous_commit = off

-- name: count_relays
SELECT count(*)::int
FROM pg_locks
WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::int::oid
  AND objid = $2::int::oid
  AND objsubid = 2
  AND granted

-- name: count_held_shards
-- How many of the shards 0..$2-1 some relay session holds (a relay holding none is a standby
-- when this is all of them).
SELECT count(DISTINCT objid)::int
FROM pg_locks
WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::int::oid
  AND objid < $2::int::oid
  AND objsubid = 2
  AND granted

-- name: try_lock_shards
-- Try the candidate shards in the given order; stop after $3 successes (the Limit pulls rows
-- one at a time, so no lock beyond the wanted number is taken).
SELECT s::int AS shard
FROM unnest($2::int[]) AS s
WHERE pg_try_advisory_lock($1::int, s::int)
LIMIT $3

-- name: await_doorbell
-- Sleep preparation (migration outbox_wakeup): take doorbell slot $1 as a session lock, waiting
-- at most $2 ms for the writers in flight. Released with unlock_shards (its objid).
SELECT core.outbox_await_doorbell($1::int, $2::int)

-- name: unlock_shards
SELECT pg_advisory_unlock($1::int, s::int) AS released
FROM unnest($2::int[]) AS s

-- name: delayed_keys
-- The keys with a delayed row not yet available, as one JSON object: each key's member is the id
-- of its first such row, and a key's rows from that id on wait (fetch_batch and outbox_stats
-- name this query in braces, and the loader, spectral/db/queries.py, puts this text in); NULL
-- when no row is delayed. A row is delayed when it was written with an available_at later than
-- its write (migration outbox_delayed_rows_indexed_alone); the conditions name the predicate of
-- outbox_delayed, which holds those rows alone, and compare its first column with the clock.
-- One object, read once per statement (an uncorrelated subquery), in which each row finds its
-- key by a binary search (`->>`): whatever the planner expects, a row costs one lookup, where a
-- list of keys joined or searched per row cost every row the whole list (10,000 keys waiting
-- behind delayed rows: ~5.7 s of CPU a fetch).
SELECT jsonb_object_agg(k.record_key, k.first_id)
FROM (
    SELECT d.record_key, min(d.id) AS first_id
    FROM core.outbox AS d
    WHERE d.published_at IS NULL
      AND d.available_at > d.created_at
      AND d.available_at > now()
    GROUP BY d.record_key
) AS k

-- name: publishable_now
-- Not a statement: the condition under which an unpublished row `o` of core.outbox may leave now,
-- put in where fetch_batch and outbox_stats name it in braces (one definition of "publishable":
-- the relay takes exactly the rows its backlog gauge counts). A row is delayed when it was
-- written with an available_at later than its write (migration outbox_delayed_rows_indexed_alone);
-- it waits for the clock to reach that time, and a row written without a delay does not, whatever
-- the clock did since its write. A row waits while an earlier unpublished row of its key is
-- delayed and not yet available (its key's member of delayed_keys, the id of that first row): a
-- key's rows leave strictly in id order even when some of them are delayed.
(
    (o.available_at <= o.created_at OR o.available_at <= now())
    AND coalesce(o.id < ((
{delayed_keys}
        ) ->> o.record_key)::bigint, true)
)

-- name: fetch_batch
-- The next publishable rows of the held shards, in id order, each with the time it became
-- publishable (its write, or its available_at when delayed); which rows may leave now is
-- publishable_now's to say. The keys of $4 are left out
-- (keys whose first row Kafka refused, waiting for their next try), and so are the rows of $5
-- (the batch in flight: sent, its acknowledgements awaited while this one is read): each a
-- hashed set, one probe per row, in the generic plan a session switches to as well (`<> ALL`
-- of a parameter array there compared each row with every key: 10,000 keys refused by a topic,
-- 1.3 s a fetch). $2 NULL: every shard is held, no row's shard is computed.
-- The delayed rows (usually none) are read once (delayed_keys), through the index that holds
-- them alone (outbox_delayed, by available_at: the conditions name its predicate, and the
-- statistics of available_at tell the planner how few are in the future), into one object of
-- each key's first delayed id, in which a row looks up its key. The session reads the rows in
-- id order through outbox_unpublished (repository.py, queue_reads): whatever the statistics say
-- of the unpublished rows, a backlog costs the rows read, not the backlog.
SELECT o.id, o.slot, o.event_type, o.record_key, o.idempotency_key, o.envelope,
       greatest(o.created_at, o.available_at) AS ready_at
FROM core.outbox AS o
WHERE o.published_at IS NULL
  AND {publishable_now}
  AND ($2::int[] IS NULL
       OR (('x' || left(md5(o.record_key), 7))::bit(28)::int % $1::int) = ANY($2::int[]))
  AND o.record_key NOT IN (SELECT unnest($4::text[]))
  AND o.id NOT IN (SELECT unnest($5::bigint[]))
ORDER BY o.id
LIMIT $3

-- name: mark_and_fetch
-- mark_published ($6, $7) and fetch_batch ($1-$5) in one statement: one round trip where the
-- relay would make two in a row. The function scan runs the mark once, whatever the fetch finds
-- (the result has one row of NULLs when it finds nothing). The mark's changes are invisible to
-- the fetch (one statement, one snapshot), so the marked rows' ids must be among $5.
-- The braced name below stands for fetch_batch's text, put in when the queries are loaded
-- (spectral/db/queries.py): one definition of which rows a batch takes.
SELECT f.id, f.slot, f.event_type, f.record_key, f.idempotency_key, f.envelope, f.ready_at
FROM core.outbox_mark_published($6::bigint[], $7::smallint[]) AS m (marked)
LEFT JOIN LATERAL (
{fetch_batch}
) AS f ON true
ORDER BY f.id

-- name: mark_published
-- Through core.outbox_mark_published (migration bounded_state): the relay role has no UPDATE
-- privilege on the outbox; the function sets published_at = now() on unpublished rows and
-- nothing else. A row is named by (id, slot): one index probe in its own partition.
SELECT core.outbox_mark_published($1::bigint[], $2::smallint[])

-- name: outbox_stats
-- depth: every unpublished row (delayed ones included); oldest_age: how long the oldest
-- publishable row has been publishable, by the condition fetch_batch takes its rows by
-- (publishable_now: neither delayed and not yet available, nor queued behind such a row of its
-- key) — 0 when none waits (and when the clock went back past it: a row written without a
-- delay is publishable whatever the clock says).
SELECT
    count(*)::bigint AS depth,
    greatest(coalesce(extract(epoch FROM now() - min(o.available_at) FILTER (
        WHERE {publishable_now}
    )), 0), 0)::float8 AS oldest_age
FROM core.outbox AS o
WHERE o.published_at IS NULL
