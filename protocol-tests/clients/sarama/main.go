// Sarama (Shopify's Go client, Debian's golang-github-shopify-sarama-dev) against Sluice: a
// Kafka client written independently of librdkafka and of the Python clients, speaking the
// oldest versions Kafka 4 still serves (Produce v3, Fetch v4, InitProducerId v0, JoinGroup v1,
// OffsetCommit v2, OffsetFetch v1, Metadata v5).
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run main.go BROKER TOPIC
//
// It creates TOPIC, produces to it with Sarama's idempotent producer (snappy batches of up to
// 100 records, each with the producer id and its sequence), reads every record back with a
// consumer group, and checks the group's committed offsets. Its last line gives the records
// per partition ("records 0=N 1=N 2=N"), for test_sarama.py to check against the broker's
// producer state. Exits non-zero with a message on the first thing that is not as Kafka
// would have it.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

const (
	partitions = 3
	records    = 20000
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "sarama: "+format+"\n", args...)
	os.Exit(1)
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V2_2_0_0
	c.ClientID = "sluice-sarama-test"
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c
}

// produce sends `records` keyed records with the idempotent producer and returns, per
// partition, the values in offset order as the acknowledgements reported them.
func produce(broker, topic string) map[int32][]string {
	c := config()
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Retry.Max = 5
	c.Producer.Return.Successes = true
	c.Producer.Flush.Messages = 100
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	c.Producer.Compression = sarama.CompressionSnappy
	p, err := sarama.NewAsyncProducer([]string{broker}, c)
	if err != nil {
		fail("idempotent producer: %v", err)
	}
	go func() {
		for i := 0; i < records; i++ {
			p.Input() <- &sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i%97)),
				Value: sarama.StringEncoder(fmt.Sprintf("v%d", i)),
			}
		}
	}()
	byOffset := map[int32]map[int64]string{}
	deadline := time.After(60 * time.Second)
	for acked := 0; acked < records; acked++ {
		select {
		case m := <-p.Successes():
			v, _ := m.Value.Encode()
			if byOffset[m.Partition] == nil {
				byOffset[m.Partition] = map[int64]string{}
			}
			if old, dup := byOffset[m.Partition][m.Offset]; dup {
				fail("partition %d offset %d acknowledged twice (%s, %s)", m.Partition, m.Offset, old, v)
			}
			byOffset[m.Partition][m.Offset] = string(v)
		case e := <-p.Errors():
			fail("produce: %v", e.Err)
		case <-deadline:
			fail("produce: %d of %d acknowledged in 60 s", acked, records)
		}
	}
	if err := p.Close(); err != nil {
		fail("producer close: %v", err)
	}
	out := map[int32][]string{}
	for part, offsets := range byOffset {
		for o := int64(0); o < int64(len(offsets)); o++ {
			v, ok := offsets[o]
			if !ok {
				fail("partition %d: offsets not contiguous from 0: %d missing of %d", part, o, len(offsets))
			}
			out[part] = append(out[part], v)
		}
	}
	return out
}

type reader struct {
	mu   sync.Mutex
	got  map[int32][]string
	want int
	done chan struct{}
	once sync.Once
}

func (r *reader) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (r *reader) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (r *reader) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		r.mu.Lock()
		if int64(len(r.got[m.Partition])) != m.Offset {
			r.mu.Unlock()
			fail("partition %d: read offset %d after %d records", m.Partition, m.Offset, len(r.got[m.Partition]))
		}
		r.got[m.Partition] = append(r.got[m.Partition], string(m.Value))
		total := 0
		for _, vs := range r.got {
			total += len(vs)
		}
		r.mu.Unlock()
		s.MarkMessage(m, "")
		if total == r.want {
			r.once.Do(func() { close(r.done) })
		}
	}
	return nil
}

// consume reads the topic from the start in consumer group `group` until `want` records came,
// then leaves the group (committing what it marked).
func consume(broker, topic, group string, want int) map[int32][]string {
	c := config()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Without a retention Sarama 1.22 commits with OffsetCommit v1, which Kafka 4 removed
	// (KIP-896) and Sluice refuses as it does; with one, v2.
	c.Consumer.Offsets.Retention = 24 * time.Hour
	c.Consumer.Return.Errors = true
	g, err := sarama.NewConsumerGroup([]string{broker}, group, c)
	if err != nil {
		fail("consumer group: %v", err)
	}
	r := &reader{got: map[int32][]string{}, want: want, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, r); err != nil && ctx.Err() == nil {
				fail("consume: %v", err)
			}
		}
	}()
	go func() {
		for e := range g.Errors() {
			fail("consumer group error: %v", e)
		}
	}()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		r.mu.Lock()
		fail("consume: group %s read %v of %d records in 60 s", group, counts(r.got), want)
	}
	cancel()
	<-stopped
	if err := g.Close(); err != nil {
		fail("consumer group close: %v", err)
	}
	return r.got
}

func counts(m map[int32][]string) map[int32]int {
	out := map[int32]int{}
	for p, vs := range m {
		out[p] = len(vs)
	}
	return out
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: main.go BROKER TOPIC")
	}
	broker, topic := os.Args[1], os.Args[2]
	group := topic + "-group"

	admin, err := sarama.NewClusterAdmin([]string{broker}, config())
	if err != nil {
		fail("admin: %v", err)
	}
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		fail("create topic: %v", err)
	}
	if err := admin.CreateTopic(topic, detail, false); err == nil {
		fail("creating %s twice succeeded", topic)
	} else if terr, ok := err.(*sarama.TopicError); !ok || terr.Err != sarama.ErrTopicAlreadyExists {
		fail("creating %s twice: %v, want TOPIC_ALREADY_EXISTS", topic, err)
	}

	produced := produce(broker, topic)
	if len(produced) != partitions {
		fail("records went to %d partitions, want %d", len(produced), partitions)
	}
	fmt.Printf("sarama: idempotent producer: %d records acknowledged, per partition %v\n", records, counts(produced))

	got := consume(broker, topic, group, records)
	for p, vs := range produced {
		if len(got[p]) != len(vs) {
			fail("partition %d: read %d records, produced %d", p, len(got[p]), len(vs))
		}
		for i := range vs {
			if got[p][i] != vs[i] {
				fail("partition %d offset %d: read %q, acknowledged %q", p, i, got[p][i], vs[i])
			}
		}
	}
	fmt.Printf("sarama: consumer group read all %d records back in offset order\n", records)

	// The group committed where it stopped: the end of each partition.
	committed, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		fail("offset fetch: %v", err)
	}
	for p, vs := range produced {
		b := committed.GetBlock(topic, p)
		if b == nil || b.Err != sarama.ErrNoError || b.Offset != int64(len(vs)) {
			fail("partition %d: committed %+v, want offset %d", p, b, len(vs))
		}
	}
	groups, err := admin.ListConsumerGroups()
	if err != nil {
		fail("list groups: %v", err)
	}
	if _, ok := groups[group]; !ok {
		fail("list groups: %s not among %v", group, groups)
	}
	admin.Close()
	fmt.Println("sarama: committed offsets at the end of each partition; the group is listed")
	fmt.Printf("records 0=%d 1=%d 2=%d\n", len(produced[0]), len(produced[1]), len(produced[2]))
}
