// Apache Kafka's own Java client (kafka-clients, see ../test_java.sh for where the jar comes
// from) against Sluice, each client with its default settings unless a check says otherwise:
// the idempotent producer (acks=all, 5 requests in flight), the classic and the KIP-848
// consumer group protocols, transactions with sendOffsetsToTransaction and a read_committed
// consumer, every compression codec, and the admin client's topic, config, offset, record and
// group calls.
//
// usage: java -cp 'JARS/*' JavaClient.java HOST:PORT[,...] [REPLICATION_FACTOR [NODE=PID,...]]
//        with NODE=PID pairs it runs only the failover check (see failover());
//        java -cp 'JARS/*' JavaClient.java HOST:PORT sasl CA.pem MTLS_HOST:PORT KEYSTORE.pem: the
//        SASL_SSL checks (sasl()), then mutual TLS (mutualTls());
//        java -cp 'JARS/*' JavaClient.java HOST:PORT restart TOPIC: see restart();
//        java -cp 'JARS/*' JavaClient.java HOST:PORT,... rolling TOPIC STOP_FILE: see rolling().
//
// Prints "ok: ..." per check and exits 1 at the first one that fails.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.quota.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class JavaClient {
    static String addr;
    static Optional<Short> rf = Optional.empty();
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);

    static void expect(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.out.flush();
            System.exit(1);
        }
    }

    static void ok(String what) {
        System.out.println("ok: " + what);
        System.out.flush();
    }

    static Properties base() {
        Properties p = new Properties();
        p.put("bootstrap.servers", addr);
        return p;
    }

    static KafkaProducer<String, String> producer(Properties extra) {
        Properties p = base();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Properties extra) {
        Properties p = base();
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    /**
     * Waits up to 10 s for `cond`. A node other than the one that committed an admin change
     * may answer from metadata a moment older, as in Kafka, and the admin client asks any node.
     */
    static void eventually(Callable<Boolean> cond, String what) throws Exception {
        expect(retrying(cond, what), what);
    }

    /** `call`'s result once it is true or it stops throwing (errors retried up to 10 s). */
    static <T> T retrying(Callable<T> call, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            try {
                T v = call.call();
                if (!Boolean.FALSE.equals(v) || System.nanoTime() > deadline) return v;
            } catch (ExecutionException e) {
                if (System.nanoTime() > deadline) throw e;
            }
            Thread.sleep(100);
        }
    }

    static Properties props(String... kv) {
        Properties p = new Properties();
        for (int i = 0; i < kv.length; i += 2) p.put(kv[i], kv[i + 1]);
        return p;
    }

    static void createTopic(Admin admin, String name, int partitions, Map<String, String> configs)
            throws Exception {
        NewTopic t = new NewTopic(name, Optional.of(partitions), rf);
        if (configs != null) t.configs(configs);
        admin.createTopics(List.of(t)).all().get(30, TimeUnit.SECONDS);
    }

    /** Reads until `want` records arrived or 60 s passed; returns them in arrival order. */
    static List<ConsumerRecord<String, String>> readAll(KafkaConsumer<String, String> c, int want) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (got.size() < want && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    /** Partition 0 of `topic` read from its start by a consumer with `extra` (see readAll). */
    static List<ConsumerRecord<String, String>> readFromStart(Properties extra, String topic, int want) {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(extra)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            return readAll(c, want);
        }
    }

    /** An admin client with `extra` is refused: its listTopics fails with `refusal`. */
    static void expectRefused(Properties extra, Class<? extends Throwable> refusal, String what) throws Exception {
        Properties p = base();
        p.putAll(extra);
        try (Admin admin = Admin.create(p)) {
            admin.listTopics().names().get(30, TimeUnit.SECONDS);
            expect(false, what + ": listed topics");
        } catch (ExecutionException e) {
            expect(refusal.isInstance(e.getCause()), what + ": " + e.getCause());
        }
    }

    /**
     * Delegation tokens: Sluice issues none and answers as Kafka with tokens disabled, its
     * default. Both the create and the describe call fail with `refusal`.
     */
    static void expectNoTokens(Admin admin, Class<? extends Throwable> refusal, String where) throws Exception {
        for (KafkaFuture<?> call : List.of(admin.createDelegationToken().delegationToken(),
                admin.describeDelegationToken().delegationTokens())) {
            try {
                call.get(30, TimeUnit.SECONDS);
                expect(false, "a delegation token call succeeded " + where);
            } catch (ExecutionException e) {
                expect(refusal.isInstance(e.getCause()), "delegation tokens " + where + ": " + e.getCause());
            }
        }
        ok("createDelegationToken and describeDelegationToken " + where + ": " + refusal.getSimpleName());
    }

    // ---------------------------------------------------------------------------------------

    /** Cluster and topic administration; returns the topic the later checks use. */
    static String admin(Admin admin) throws Exception {
        DescribeClusterResult dc = admin.describeCluster();
        String clusterId = dc.clusterId().get();
        Collection<Node> nodes = dc.nodes().get();
        Node controller = dc.controller().get();
        expect(clusterId != null && !clusterId.isEmpty(), "describeCluster: a cluster id");
        expect(!nodes.isEmpty() && controller != null, "describeCluster: nodes and a controller");
        ok("describeCluster: id " + clusterId + ", " + nodes.size() + " node(s), controller "
                + controller.id());

        String topic = "java-" + RUN;
        createTopic(admin, topic, 3, null);
        eventually(() -> admin.listTopics().names().get().contains(topic), "listTopics names " + topic);
        TopicDescription td = retrying(() -> admin.describeTopics(List.of(topic)).allTopicNames().get()
                .get(topic), "describeTopics " + topic);
        expect(td.partitions().size() == 3, "describeTopics: 3 partitions, got " + td.partitions());
        expect(td.topicId() != null && !td.topicId().equals(Uuid.ZERO_UUID), "a topic id");
        for (TopicPartitionInfo p : td.partitions()) {
            expect(p.leader() != null && !p.isr().isEmpty(), "partition " + p + " has a leader");
        }
        // The same topic by id (Metadata by topic id).
        TopicDescription byId = retrying(() -> admin.describeTopics(TopicCollection.ofTopicIds(
                List.of(td.topicId()))).allTopicIds().get().get(td.topicId()), "describeTopics by id");
        expect(byId.name().equals(topic), "describeTopics by id names " + byId.name());
        ok("createTopics, listTopics, describeTopics by name and id: " + topic + " " + td.topicId());

        // A second create of the same name is refused with Kafka's error.
        try {
            createTopic(admin, topic, 3, null);
            expect(false, "a second createTopics of " + topic + " succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof TopicExistsException, "TopicExistsException, got " + e.getCause());
        }
        ok("createTopics of an existing name: TopicExistsException");

        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"), AlterConfigOp.OpType.SET))))
                .all().get();
        eventually(() -> "86400000".equals(admin.describeConfigs(List.of(res)).all().get().get(res)
                .get("retention.ms").value()), "retention.ms described after incrementalAlterConfigs");
        Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
        ConfigEntry ret = cfg.get("retention.ms");
        expect(ret != null && ret.value().equals("86400000")
                        && ret.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                "retention.ms after incrementalAlterConfigs: " + ret);
        ConfigEntry cp = cfg.get("cleanup.policy");
        expect(cp != null && cp.value().equals("delete"), "cleanup.policy default: " + cp);
        ok("incrementalAlterConfigs and describeConfigs on the topic (retention.ms "
                + ret.value() + ", " + ret.source() + ")");

        // Broker configs: the cluster-wide default (empty name) and one broker.
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER,
                String.valueOf(controller.id()));
        Config bc = admin.describeConfigs(List.of(broker)).all().get().get(broker);
        ConfigEntry mmb = bc.get("message.max.bytes");
        expect(mmb != null && Integer.parseInt(mmb.value()) > 0, "broker message.max.bytes: " + mmb);
        ok("describeConfigs on broker " + controller.id() + ": " + bc.entries().size()
                + " entries, message.max.bytes " + mmb.value());

        // Invalid config values and unknown keys get Kafka's errors.
        try {
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get();
            expect(false, "retention.ms=soon accepted");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof InvalidConfigurationException
                    || e.getCause() instanceof InvalidRequestException, "retention.ms=soon: " + e.getCause());
        }
        ok("incrementalAlterConfigs with a bad value (retention.ms=soon): refused");

        FeatureMetadata fm = admin.describeFeatures().featureMetadata().get();
        // Sluice finalizes the features it serves (compat-matrix.md, Features).
        FinalizedVersionRange tv = fm.finalizedFeatures().get("transaction.version");
        FinalizedVersionRange gv = fm.finalizedFeatures().get("group.version");
        expect(tv != null && tv.maxVersionLevel() == 2 && gv != null && gv.maxVersionLevel() == 1,
                "describeFeatures: transaction.version 2 and group.version 1, got " + fm.finalizedFeatures());
        ok("describeFeatures: " + fm.finalizedFeatures().keySet());
        return topic;
    }

    /** The default producer: idempotent, acks=all. Returns the records' count per partition. */
    static Map<Integer, Integer> produceDefault(Admin admin, String topic, int n) throws Exception {
        Map<Integer, Integer> counts = new TreeMap<>();
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, "k" + i, "v" + i);
                r.headers().add("seq", Integer.toString(i).getBytes());
                fs.add(p.send(r));
            }
            p.flush();
            Map<Integer, Long> next = new HashMap<>();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = fs.get(i).get();
                // Per partition, offsets are assigned in send order without gaps.
                long want = next.getOrDefault(md.partition(), 0L);
                expect(md.offset() == want, "record " + i + " at " + md + ", expected offset " + want);
                next.put(md.partition(), want + 1);
                counts.merge(md.partition(), 1, Integer::sum);
            }
        }
        ok("default producer (idempotent, acks=all): " + n + " records, offsets contiguous per partition " + counts);

        // The producer really was idempotent: the broker tracked its sequences.
        List<TopicPartition> tps = counts.keySet().stream().map(p -> new TopicPartition(topic, p))
                .collect(Collectors.toList());
        Map<TopicPartition, DescribeProducersResult.PartitionProducerState> ps =
                admin.describeProducers(tps).all().get();
        for (TopicPartition tp : tps) {
            List<ProducerState> states = ps.get(tp).activeProducers();
            expect(states.size() == 1, tp + ": one producer, got " + states);
            expect(states.get(0).lastSequence() == counts.get(tp.partition()) - 1,
                    tp + ": last sequence " + states.get(0).lastSequence());
        }
        ok("describeProducers: one producer per partition, last sequence = records - 1");
        return counts;
    }

    static void checkRecords(List<ConsumerRecord<String, String>> got, int n, String what) {
        expect(got.size() == n, what + ": " + got.size() + " records, expected " + n);
        Set<String> values = new HashSet<>();
        Map<Integer, Long> next = new HashMap<>();
        for (ConsumerRecord<String, String> r : got) {
            String i = r.key().substring(1);
            expect(r.value().equals("v" + i), what + ": key " + r.key() + " value " + r.value());
            Header h = r.headers().lastHeader("seq");
            expect(h != null && new String(h.value()).equals(i), what + ": header of " + r.key());
            long want = next.getOrDefault(r.partition(), 0L);
            expect(r.offset() == want, what + ": offset " + r.offset() + " in " + r.partition()
                    + ", expected " + want);
            next.put(r.partition(), want + 1);
            values.add(r.value());
        }
        expect(values.size() == n, what + ": duplicates");
    }

    static void consumeClassic(Admin admin, String topic, int n) throws Exception {
        String group = "java-classic-" + RUN;
        try (KafkaConsumer<String, String> c = consumer(props("group.id", group,
                "auto.offset.reset", "earliest"))) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = readAll(c, n);
            checkRecords(got, n, "classic consumer");
            c.commitSync();
        }
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(
                committed.keySet().stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest())))
                .all().get();
        expect(committed.size() == 3, "committed offsets for 3 partitions: " + committed);
        for (TopicPartition tp : committed.keySet()) {
            expect(committed.get(tp).offset() == ends.get(tp).offset(),
                    tp + " committed " + committed.get(tp) + ", end " + ends.get(tp).offset());
        }
        ConsumerGroupDescription gd = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        expect(gd.groupState() == GroupState.EMPTY, "group " + group + " after close: " + gd.groupState());
        ok("classic consumer group: read all " + n + " in order, committed the end offsets, group EMPTY");

        // A new member of the group starts from the committed offsets: nothing to read.
        try (KafkaConsumer<String, String> c = consumer(props("group.id", group,
                "auto.offset.reset", "earliest"))) {
            c.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
            while (System.nanoTime() < deadline) seen += c.poll(Duration.ofMillis(200)).count();
            expect(seen == 0, "a rejoined member read " + seen + " records past the committed offsets");
            expect(c.assignment().size() == 3, "rejoined member assigned " + c.assignment());
        }
        ok("classic group: a new member resumes at the committed offsets");
    }

    /** The group's description once `ready` holds for it (the group may not exist yet: until
     *  its first member's join or heartbeat Kafka 4 answers GROUP_ID_NOT_FOUND). */
    static ConsumerGroupDescription describeUntil(Admin admin, String group,
            java.util.function.Predicate<ConsumerGroupDescription> ready, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        ConsumerGroupDescription gd = null;
        while (System.nanoTime() < deadline) {
            try {
                gd = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                if (ready.test(gd)) return gd;
            } catch (ExecutionException e) {
                expect(e.getCause() instanceof GroupIdNotFoundException, "describe: " + e.getCause());
            }
            Thread.sleep(200);
        }
        expect(false, what + ": " + gd);
        return gd;
    }

    /**
     * Two members of one group (`group.protocol` classic, with the Java client's default
     * assignors, or consumer, KIP-848) split a topic's 3 partitions and read everything; when
     * one closes, the other takes all 3 partitions and reads what is written next.
     */
    static void twoMembers(Admin admin, int n, String protocol) throws Exception {
        String group = "java-two-" + protocol + "-" + RUN;
        String topic = group;
        createTopic(admin, topic, 3, null);
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
        }
        Properties pr = props("group.id", group, "group.protocol", protocol, "auto.offset.reset", "earliest");
        ExecutorService ex = Executors.newFixedThreadPool(2);
        List<CountDownLatch> stop = List.of(new CountDownLatch(1), new CountDownLatch(1));
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<Future<?>> fs = new ArrayList<>();
        for (int m = 0; m < 2; m++) {
            CountDownLatch mine = stop.get(m);
            fs.add(ex.submit(() -> {
                try (KafkaConsumer<String, String> c = consumer(pr)) {
                    c.subscribe(List.of(topic));
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
                    while (System.nanoTime() < deadline && !mine.await(0, TimeUnit.MILLISECONDS)) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) seen.add(r.value());
                    }
                }
                return null;
            }));
        }
        GroupType type = protocol.equals("consumer") ? GroupType.CONSUMER : GroupType.CLASSIC;
        // Both members hold partitions and every record was read: the group is balanced.
        ConsumerGroupDescription gd = describeUntil(admin, group, d -> d.members().size() == 2
                && d.members().stream().allMatch(mm -> !mm.assignment().topicPartitions().isEmpty())
                && seen.size() == n, "2 members holding partitions, " + n + " records read");
        expect(gd.type() == type, "group type " + gd.type());
        Set<TopicPartition> union = new HashSet<>();
        int sum = 0;
        for (MemberDescription md : gd.members()) {
            union.addAll(md.assignment().topicPartitions());
            sum += md.assignment().topicPartitions().size();
        }
        expect(union.size() == 3 && sum == 3, "assignments disjoint and covering: " + gd.members());
        // One member leaves: the other takes everything and reads what comes next.
        stop.get(0).countDown();
        fs.get(0).get(60, TimeUnit.SECONDS);
        describeUntil(admin, group, d -> d.members().size() == 1
                && d.members().iterator().next().assignment().topicPartitions().size() == 3,
                "1 member holding all 3 partitions");
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < 300; i++) p.send(new ProducerRecord<>(topic, "w" + i, "w" + i));
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (seen.size() < n + 300 && System.nanoTime() < deadline) Thread.sleep(100);
        expect(seen.size() == n + 300, "the remaining member read " + (seen.size() - n) + " of 300 new records");
        stop.get(1).countDown();
        fs.get(1).get(60, TimeUnit.SECONDS);
        ex.shutdown();
        ok("group.protocol=" + protocol + " (" + type + "): 2 members split 3 partitions and read all " + n
                + "; one left, the other took all 3 and read 300 more");
    }

    static KafkaShareConsumer<String, String> shareConsumer(Properties extra) {
        Properties p = base();
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.putAll(extra);
        return new KafkaShareConsumer<>(p);
    }

    /**
     * Share groups (KIP-932, queues): two KafkaShareConsumers with the client's defaults
     * (implicit acknowledgement) share a topic's records, each delivered once; the admin client
     * describes and lists the group; a consumer in explicit mode releases, rejects and accepts
     * records, and only the released ones come back, one delivery later.
     */
    static void shareGroups(Admin admin) throws Exception {
        String topic = "java-share-" + RUN;
        String group = topic;
        int n = 1000;
        createTopic(admin, topic, 3, null);
        ConfigResource gr = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(gr, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
        }
        Map<String, Integer> deliveries = new ConcurrentHashMap<>();
        List<AtomicInteger> perMember = List.of(new AtomicInteger(), new AtomicInteger());
        CountDownLatch stop = new CountDownLatch(1);
        ExecutorService ex = Executors.newFixedThreadPool(2);
        List<Future<?>> fs = new ArrayList<>();
        for (int m = 0; m < 2; m++) {
            AtomicInteger mine = perMember.get(m);
            fs.add(ex.submit(() -> {
                try (KafkaShareConsumer<String, String> c = shareConsumer(props("group.id", group))) {
                    c.subscribe(List.of(topic));
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
                    while (System.nanoTime() < deadline && !stop.await(0, TimeUnit.MILLISECONDS)) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                            deliveries.merge(r.value(), 1, Integer::sum);
                            mine.incrementAndGet();
                        }
                    }
                }
                return null;
            }));
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        ShareGroupDescription sd = null;
        while (System.nanoTime() < deadline) {
            try {
                sd = admin.describeShareGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
            } catch (ExecutionException e) {
                // Not found until the first member joins.
                Thread.sleep(200);
                continue;
            }
            if (deliveries.size() == n && sd.members().size() == 2
                    && sd.members().stream().allMatch(mm -> !mm.assignment().topicPartitions().isEmpty())) break;
            Thread.sleep(200);
        }
        expect(deliveries.size() == n, "the share group read " + deliveries.size() + " of " + n);
        expect(sd != null && sd.groupState() == GroupState.STABLE && sd.members().size() == 2,
                "describeShareGroups: " + sd);
        Set<TopicPartition> union = new HashSet<>();
        for (ShareMemberDescription md : sd.members()) union.addAll(md.assignment().topicPartitions());
        expect(union.size() == 3, "the members' assignments cover the 3 partitions: " + sd.members());
        Collection<GroupListing> listed = admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.SHARE)))
                .all().get(30, TimeUnit.SECONDS);
        expect(listed.stream().anyMatch(g -> g.groupId().equals(group) && g.type().equals(Optional.of(GroupType.SHARE))),
                "listGroups(SHARE): " + listed);
        stop.countDown();
        for (Future<?> f : fs) f.get(60, TimeUnit.SECONDS);
        ex.shutdown();
        List<String> twice = deliveries.entrySet().stream().filter(e -> e.getValue() != 1).map(Map.Entry::getKey)
                .collect(Collectors.toList());
        expect(twice.isEmpty(), "records delivered more than once: " + twice);
        // Which member read how many depends on when the second one joined: the first may have
        // read everything by then (on three nodes it often has).
        eventually(() -> admin.describeShareGroups(List.of(group)).all().get().get(group).groupState() == GroupState.EMPTY,
                "the share group is empty once both consumers closed");
        ok("share group (KafkaShareConsumer, defaults): 2 members read " + n + " records, each delivered once ("
                + perMember.get(0) + " + " + perMember.get(1) + "); describeShareGroups, listGroups(SHARE)");

        // The group's start offsets: every record was accepted, so each partition's start is
        // its end. Reset partition 0 to 0 (the group is empty) and a new member reads it
        // again, each record at its first delivery; deleting the offsets leaves none.
        Map<TopicPartition, SharePartitionOffsetInfo> starts = admin.listShareGroupOffsets(
                Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (int p = 0; p < 3; p++) ends.put(new TopicPartition(topic, p), null);
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> latest = admin.listOffsets(
                ends.keySet().stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()))).all().get();
        latest.forEach((tp, info) -> ends.put(tp, info.offset()));
        expect(starts.size() == 3 && starts.entrySet().stream().allMatch(e -> e.getValue().startOffset() == ends.get(e.getKey())),
                "listShareGroupOffsets: " + starts + ", the partitions' ends " + ends);
        TopicPartition p0 = new TopicPartition(topic, 0);
        admin.alterShareGroupOffsets(group, Map.of(p0, 0L)).all().get(30, TimeUnit.SECONDS);
        long again = ends.get(p0);
        List<ConsumerRecord<String, String>> reread = new ArrayList<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(props("group.id", group))) {
            c.subscribe(List.of(topic));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (reread.size() < again && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) reread.add(r);
            }
        }
        expect(reread.size() == again && reread.stream().allMatch(r -> r.partition() == 0
                && r.deliveryCount().orElse((short) 0) == 1),
                "after alterShareGroupOffsets(p0 -> 0): read " + reread.size() + " of " + again + " again");
        admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, SharePartitionOffsetInfo> gone = admin.listShareGroupOffsets(
                Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
        expect(gone.values().stream().allMatch(i -> i.startOffset() < 0), "after deleteShareGroupOffsets: " + gone);
        ok("share group offsets: listShareGroupOffsets (each partition's end), alterShareGroupOffsets (" + again
                + " records of partition 0 read again), deleteShareGroupOffsets");

        // Explicit acknowledgement: release, reject, accept.
        String more = topic + "-explicit";
        createTopic(admin, more, 1, null);
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < 30; i++) p.send(new ProducerRecord<>(more, "x" + i, "x" + i));
        }
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, more), List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        Set<String> released = new HashSet<>();
        Set<String> rejected = new HashSet<>();
        Map<String, Short> redelivered = new HashMap<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(
                props("group.id", more, "share.acknowledgement.mode", "explicit"))) {
            c.subscribe(List.of(more));
            int handled = 0;
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (handled < 30 && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    int i = Integer.parseInt(r.value().substring(1));
                    if (released.contains(r.value())) {
                        redelivered.put(r.value(), r.deliveryCount().orElse((short) -1));
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        continue;
                    }
                    handled++;
                    if (i % 3 == 0) {
                        released.add(r.value());
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    } else if (i % 3 == 1) {
                        rejected.add(r.value());
                        c.acknowledge(r, AcknowledgeType.REJECT);
                    } else {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
                c.commitSync();
            }
            expect(handled == 30, "explicit mode: " + handled + " of 30 records delivered");
            // The released ones come back, at their second delivery; the rejected never.
            until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (redelivered.size() < released.size() && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    expect(released.contains(r.value()), "delivered again, though not released: " + r.value());
                    redelivered.put(r.value(), r.deliveryCount().orElse((short) -1));
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitSync();
            }
            expect(redelivered.keySet().equals(released), "released " + released + ", delivered again " + redelivered.keySet());
            expect(redelivered.values().stream().allMatch(d -> d == 2), "delivery counts of the released: " + redelivered);
            for (int i = 0; i < 5; i++) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    expect(false, "delivered again after all were accepted or rejected: " + r.value());
                }
            }
        }
        // Transactions: a share group reads uncommitted records (Kafka's default
        // share.isolation.level), and the client acknowledges the markers as gaps, so the
        // start offset passes the last marker.
        String txt = topic + "-txn";
        createTopic(admin, txt, 1, null);
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, txt), List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        try (KafkaProducer<String, String> p = producer(props("transactional.id", txt))) {
            p.initTransactions();
            for (int t = 0; t < 3; t++) {
                p.beginTransaction();
                for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(txt, "t" + t + "-" + i));
                p.flush();
                if (t == 1) p.abortTransaction(); else p.commitTransaction();
            }
        }
        List<String> txnValues = new ArrayList<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(props("group.id", txt))) {
            c.subscribe(List.of(txt));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (txnValues.size() < 15 && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) txnValues.add(r.value());
            }
            // In implicit mode the next poll acknowledges the last batch; close() alone would
            // release it for another delivery, as Kafka's consumer does.
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) txnValues.add(r.value());
        }
        expect(txnValues.size() == 15, "a share group read " + txnValues.size() + " of 15 transactional records: " + txnValues);
        long txnStart = retrying(() -> admin.listShareGroupOffsets(Map.of(txt, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(txt).get().get(new TopicPartition(txt, 0)).startOffset() == 18L,
                "the start offset passes the markers") ? 18 : -1;
        expect(txnStart == 18, "share group start offset after 3 transactions: not 18 but "
                + admin.listShareGroupOffsets(Map.of(txt, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(txt).get()
                + ", end " + admin.listOffsets(Map.of(new TopicPartition(txt, 0), OffsetSpec.latest())).all().get());
        ok("share group and transactions: 15 records of 3 transactions (one aborted, read uncommitted), start offset 18 past the 3 markers");
        // share.isolation.level=read_committed: the aborted transaction is never delivered, and
        // an open one waits for its commit (the group reads up to the last stable offset).
        String rc = txt + "-rc";
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, rc), List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.isolation.level", "read_committed"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.delivery.count.limit", "3"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.partition.max.record.locks", "500"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        ConfigResource rcGroup = new ConfigResource(ConfigResource.Type.GROUP, rc);
        Config rcConfig = admin.describeConfigs(List.of(rcGroup)).all().get(30, TimeUnit.SECONDS).get(rcGroup);
        String level = rcConfig.get("share.isolation.level").value();
        expect("read_committed".equals(level), "describeConfigs of the group: share.isolation.level " + level);
        String limit = rcConfig.get("share.delivery.count.limit").value();
        expect("3".equals(limit), "describeConfigs of the group: share.delivery.count.limit " + limit);
        String locks = rcConfig.get("share.partition.max.record.locks").value();
        expect("500".equals(locks), "describeConfigs of the group: share.partition.max.record.locks " + locks);
        try {
            admin.incrementalAlterConfigs(Map.of(rcGroup, List.of(
                    new AlterConfigOp(new ConfigEntry("share.isolation.level", "serializable"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
            expect(false, "share.isolation.level=serializable accepted");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof InvalidConfigurationException, "share.isolation.level=serializable: " + e.getCause());
        }
        List<String> committed = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(props("transactional.id", rc));
             KafkaShareConsumer<String, String> c = shareConsumer(props("group.id", rc))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(txt, "open-" + i));
            p.flush();
            c.subscribe(List.of(txt));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (committed.size() < 10 && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) committed.add(r.value());
            }
            for (int i = 0; i < 5; i++) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) committed.add(r.value());
            }
            List<String> expected = new ArrayList<>();
            for (int t : new int[] {0, 2}) for (int i = 0; i < 5; i++) expected.add("t" + t + "-" + i);
            expect(committed.equals(expected), "read_committed share group before the commit: " + committed);
            p.commitTransaction();
            until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (committed.size() < 15 && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) committed.add(r.value());
            }
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) committed.add(r.value());
            for (int i = 0; i < 5; i++) expected.add("open-" + i);
            expect(committed.equals(expected), "read_committed share group after the commit: " + committed);
        }
        ok("share group read_committed: the 10 committed records, none of the aborted transaction, an open transaction's 5 only after its commit");
        String modes = shareModes(admin, topic);
        admin.deleteShareGroups(List.of(group, more, txt, rc, modes)).all().get(30, TimeUnit.SECONDS);
        Collection<GroupListing> after = admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.SHARE)))
                .all().get(30, TimeUnit.SECONDS);
        expect(after.stream().noneMatch(g -> g.groupId().equals(group) || g.groupId().equals(more) || g.groupId().equals(txt)),
                "deleteShareGroups: still listed " + after);
        ok("share group, explicit acknowledgement: " + released.size() + " released and delivered again (count 2), "
                + rejected.size() + " rejected and never again; deleteShareGroups");
    }

    /**
     * Kafka 4.2's share-group additions, with ShareFetch and ShareAcknowledge v2 and
     * DescribeShareGroupOffsets v1: `share.acquire.mode=record_limit` (KIP-1206) never hands a
     * poll more than max.poll.records, though the records were written as one batch; the lag
     * of listShareGroupOffsets (KIP-1226) counts what is not yet acknowledged; RENEW (KIP-1222)
     * keeps a record for the consumer, which returns it on a later poll at the same delivery.
     * Returns the group it made.
     */
    static String shareModes(Admin admin, String base) throws Exception {
        String topic = base + "-modes";
        String group = topic;
        int n = 100;
        createTopic(admin, topic, 1, null);
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        try (KafkaProducer<String, String> p = producer(props("linger.ms", "100"))) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, "k" + i, "m" + i));
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        Set<String> seen = new HashSet<>();
        int largest = 0;
        long lagAfterFirst = -2;
        try (KafkaShareConsumer<String, String> c = shareConsumer(props("group.id", group,
                "share.acknowledgement.mode", "explicit", "share.acquire.mode", "record_limit", "max.poll.records", "7"))) {
            c.subscribe(List.of(topic));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            ConsumerRecord<String, String> renewed = null;
            boolean renewedBack = false;
            while ((seen.size() < n || !renewedBack) && System.nanoTime() < until) {
                ConsumerRecords<String, String> got = c.poll(Duration.ofMillis(200));
                largest = Math.max(largest, got.count());
                for (ConsumerRecord<String, String> r : got) {
                    if (renewed == null && r.offset() == 10) {
                        // Kept: the consumer hands it back on a later poll, at the same delivery.
                        renewed = r;
                        c.acknowledge(r, AcknowledgeType.RENEW);
                        continue;
                    }
                    if (renewed != null && r.offset() == renewed.offset()) {
                        expect(r.deliveryCount().equals(renewed.deliveryCount()),
                                "a renewed record came back at delivery " + r.deliveryCount());
                        renewedBack = true;
                    }
                    seen.add(r.value());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                Map<TopicIdPartition, Optional<KafkaException>> committed = c.commitSync();
                expect(committed.values().stream().allMatch(Optional::isEmpty), "acknowledgements refused: " + committed);
                if (lagAfterFirst == -2 && !seen.isEmpty()) {
                    // What the first poll accepted is done; the rest of the batch is lag.
                    SharePartitionOffsetInfo info = admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                            .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS).get(tp);
                    expect(info != null && info.startOffset() == seen.size(), "start offset after the first poll: " + info);
                    lagAfterFirst = info.lag().orElse(-1L);
                    expect(lagAfterFirst == n - seen.size(), "lag after accepting " + seen.size() + " of " + n + ": " + info);
                }
            }
            expect(renewedBack, "the renewed record never came back");
            Optional<Integer> lock = c.acquisitionLockTimeoutMs();
            expect(lock.isPresent() && lock.get() > 0, "acquisitionLockTimeoutMs: " + lock);
        }
        expect(seen.size() == n, "record_limit: read " + seen.size() + " of " + n);
        expect(largest > 0 && largest <= 7, "record_limit with max.poll.records=7: a poll of " + largest);
        SharePartitionOffsetInfo done = admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS).get(tp);
        expect(done.startOffset() == n && done.lag().equals(Optional.of(0L)), "after all were accepted: " + done);
        ok("share group v2: share.acquire.mode=record_limit read " + n + " records, at most " + largest
                + " a poll (max.poll.records=7); listShareGroupOffsets lag " + lagAfterFirst + " then 0; a RENEWed record kept and returned");
        return group;
    }

    /** The consumer's `preferred-read-replica` metric for `tp` (KIP-392): -1 while it reads
     *  from the leader; NaN when the consumer has no such metric. */
    static double preferredReadReplica(KafkaConsumer<String, String> c, TopicPartition tp) {
        for (Map.Entry<MetricName, ? extends Metric> e : c.metrics().entrySet()) {
            Map<String, String> tags = e.getKey().tags();
            if (e.getKey().name().equals("preferred-read-replica") && tp.topic().equals(tags.get("topic"))
                    && String.valueOf(tp.partition()).equals(tags.get("partition"))) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        return Double.NaN;
    }

    /** KIP-392 on the three nodes, which test_java.sh starts with broker.rack rack-N and the
     *  RackAwareReplicaSelector: a consumer with the client.rack of a follower's rack is sent
     *  there by the leader and reads every record of the partition from it. */
    static void followerFetching(Admin admin, String topic) throws Exception {
        TopicPartitionInfo p0 = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(0);
        Node leader = p0.leader();
        Node follower = p0.isr().stream().filter(r -> r.id() != leader.id()).findFirst().orElseThrow();
        expect(follower.hasRack() && !follower.rack().equals(leader.rack()),
                "racks in describeTopics: leader " + leader + ", follower " + follower);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(props("client.rack", follower.rack()))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp)).get(tp);
            List<ConsumerRecord<String, String>> got = readAll(c, (int) end);
            expect(got.size() == end, "client.rack " + follower.rack() + ": read " + got.size() + " of " + end);
            eventually(() -> {
                c.poll(Duration.ofMillis(100));
                return preferredReadReplica(c, tp) == follower.id();
            }, "preferred-read-replica of " + tp + " is " + follower.id() + ", got " + preferredReadReplica(c, tp));
            ok("client.rack " + follower.rack() + ": the leader " + leader.id() + " sent the consumer to follower "
                    + follower.id() + " (preferred-read-replica), which served all " + end + " records of " + tp);
        }
    }

    static short finalized(Admin admin, String feature) throws Exception {
        FinalizedVersionRange r = admin.describeFeatures().featureMetadata().get().finalizedFeatures().get(feature);
        return r == null ? 0 : r.maxVersionLevel();
    }

    /** Commits two transactions with a new producer; the producer epoch described after each. */
    static List<Integer> epochsOverTwoCommits(Admin admin, String topic, String txid) throws Exception {
        List<Integer> epochs = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(props("transactional.id", txid))) {
            p.initTransactions();
            for (int i = 0; i < 2; i++) {
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, txid, "txn-" + i));
                p.commitTransaction();
                epochs.add(admin.describeTransactions(List.of(txid)).all().get().get(txid).producerEpoch());
            }
        }
        return epochs;
    }

    /** kafka-features.sh upgrade/downgrade: Admin.updateFeatures changes the levels the cluster
     *  runs at, clients pick them up, and Sluice refuses what Kafka's controller refuses. */
    static void features(Admin admin) throws Exception {
        String topic = "java-features-" + RUN;
        createTopic(admin, topic, 1, null);
        UpdateFeaturesOptions validateOnly = new UpdateFeaturesOptions().validateOnly(true);
        admin.updateFeatures(Map.of("transaction.version",
                new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)), validateOnly).all().get();
        expect(finalized(admin, "transaction.version") == 2, "validateOnly changed transaction.version");
        for (Map.Entry<String, FeatureUpdate> bad : List.of(
                Map.entry("transaction.version", new FeatureUpdate((short) 3, FeatureUpdate.UpgradeType.UPGRADE)),
                Map.entry("metadata.version", new FeatureUpdate((short) 27, FeatureUpdate.UpgradeType.UPGRADE)),
                Map.entry("transaction.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)))) {
            try {
                admin.updateFeatures(Map.ofEntries(bad), new UpdateFeaturesOptions()).all().get();
                expect(false, "updateFeatures " + bad + " succeeded");
            } catch (ExecutionException e) {
                expect(e.getCause() instanceof InvalidUpdateVersionException, "updateFeatures " + bad + ": " + e.getCause());
            }
        }
        // At transaction.version 2 (KIP-890 part 2) every commit bumps the producer epoch.
        List<Integer> tv2 = epochsOverTwoCommits(admin, topic, "java-tv2-" + RUN);
        expect(tv2.get(1) > tv2.get(0), "transaction.version 2: epochs " + tv2);
        try {
            admin.updateFeatures(Map.of("transaction.version",
                    new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)), new UpdateFeaturesOptions())
                    .all().get();
            eventually(() -> finalized(admin, "transaction.version") == 1, "describeFeatures: transaction.version 1");
            // A new producer reads level 1 and uses the classic protocol: the epoch stays.
            List<Integer> tv1 = epochsOverTwoCommits(admin, topic, "java-tv1-" + RUN);
            expect(tv1.get(1).equals(tv1.get(0)), "transaction.version 1: epochs " + tv1);
            admin.updateFeatures(Map.of("group.version",
                    new FeatureUpdate((short) 0, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)), new UpdateFeaturesOptions())
                    .all().get();
            eventually(() -> finalized(admin, "group.version") == 0, "describeFeatures: group.version 0");
            // The consumer group protocol is off: a group.protocol=consumer consumer is refused.
            try (KafkaConsumer<String, String> c = consumer(props("group.id", "java-gv0-" + RUN,
                    "group.protocol", "consumer"))) {
                c.subscribe(List.of(topic));
                Throwable refused = null;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (refused == null && System.nanoTime() < deadline) {
                    try {
                        c.poll(Duration.ofMillis(200));
                    } catch (UnsupportedVersionException e) {
                        refused = e;
                    }
                }
                expect(refused != null, "group.version 0: a group.protocol=consumer consumer was not refused");
            }
            ok("updateFeatures: transaction.version 2 bumps the epoch at each commit " + tv2 + ", 1 does not " + tv1
                    + "; group.version 0 refuses group.protocol=consumer; validateOnly changes nothing; "
                    + "level 3, metadata.version and a downgrade typed as upgrade: InvalidUpdateVersionException");
        } finally {
            admin.updateFeatures(Map.of(
                    "transaction.version", new FeatureUpdate((short) 2, FeatureUpdate.UpgradeType.UPGRADE),
                    "group.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)),
                    new UpdateFeaturesOptions()).all().get();
            eventually(() -> finalized(admin, "transaction.version") == 2 && finalized(admin, "group.version") == 1,
                    "describeFeatures: the levels restored");
        }
    }

    static void transactions(Admin admin) throws Exception {
        String in = "java-txn-" + RUN;
        createTopic(admin, in, 1, null);
        String group = "java-txn-group-" + RUN;
        try (KafkaProducer<String, String> p = producer(props("transactional.id", "java-tx-" + RUN));
             KafkaConsumer<String, String> meta = consumer(props("group.id", group))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(in, "c" + i, "committed-" + i));
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(in, "a" + i, "aborted-" + i));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            for (int i = 10; i < 15; i++) p.send(new ProducerRecord<>(in, "c" + i, "committed-" + i));
            p.sendOffsetsToTransaction(Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(7)),
                    meta.groupMetadata());
            p.commitTransaction();
        }
        try (KafkaConsumer<String, String> c = consumer(props("group.id", "java-rc-" + RUN,
                "auto.offset.reset", "earliest", "isolation.level", "read_committed"))) {
            c.subscribe(List.of(in));
            List<ConsumerRecord<String, String>> got = readAll(c, 15);
            // Nothing more arrives: the aborted records stay hidden.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
            while (System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
            }
            List<String> values = got.stream().map(ConsumerRecord::value).collect(Collectors.toList());
            List<String> want = IntStream.range(0, 15).mapToObj(i -> "committed-" + i)
                    .collect(Collectors.toList());
            expect(values.equals(want), "read_committed read " + values);
        }
        // read_uncommitted sees the aborted ones too (25 data records).
        try (KafkaConsumer<String, String> c = consumer(props("auto.offset.reset", "earliest"))) {
            c.assign(List.of(new TopicPartition(in, 0)));
            List<ConsumerRecord<String, String>> got = readAll(c, 25);
            expect(got.size() == 25, "read_uncommitted read " + got.size() + " of 25");
        }
        OffsetAndMetadata om = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                .get(new TopicPartition(in, 0));
        expect(om != null && om.offset() == 7, "offset committed in the transaction: " + om);
        ok("transactions: commit, abort, sendOffsetsToTransaction; read_committed sees the 15 committed");
    }

    static void compression(Admin admin) throws Exception {
        for (String codec : List.of("gzip", "snappy", "lz4", "zstd")) {
            String t = "java-" + codec + "-" + RUN;
            createTopic(admin, t, 1, null);
            int n = 500;
            try (KafkaProducer<String, String> p = producer(props("compression.type", codec,
                    "linger.ms", "20"))) {
                for (int i = 0; i < n; i++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(t, "k" + i,
                            "v" + i);
                    r.headers().add("seq", Integer.toString(i).getBytes());
                    p.send(r);
                }
                p.flush();
            }
            try (KafkaConsumer<String, String> c = consumer(props("auto.offset.reset", "earliest"))) {
                c.assign(List.of(new TopicPartition(t, 0)));
                checkRecords(readAll(c, n), n, codec);
            }
            ok("compression.type=" + codec + ": " + n + " records back");
        }
    }

    static void offsetsAndDeletes(Admin admin, String topic, Map<Integer, Integer> counts) throws Exception {
        TopicPartition tp = new TopicPartition(topic, counts.keySet().iterator().next());
        int count = counts.get(tp.partition());
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r;
        r = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get();
        expect(r.get(tp).offset() == 0, "earliest " + r.get(tp));
        r = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get();
        expect(r.get(tp).offset() == count, "latest " + r.get(tp) + ", expected " + count);
        r = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get();
        expect(r.get(tp).offset() >= 0 && r.get(tp).offset() < count, "max timestamp " + r.get(tp));
        long ts = r.get(tp).timestamp();
        r = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(ts))).all().get();
        expect(r.get(tp).offset() >= 0 && r.get(tp).offset() < count && r.get(tp).timestamp() == ts,
                "for timestamp " + ts + ": " + r.get(tp));
        ok("listOffsets: earliest 0, latest " + count + ", max timestamp and for timestamp");

        long cut = count / 2;
        DeleteRecordsResult dr = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(cut)));
        expect(dr.lowWatermarks().get(tp).get().lowWatermark() == cut, "deleteRecords low watermark");
        r = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get();
        expect(r.get(tp).offset() == cut, "earliest after deleteRecords " + r.get(tp));
        // Without tiered storage the local log start is the log start, and nothing is tiered.
        r = admin.listOffsets(Map.of(tp, OffsetSpec.earliestLocal())).all().get();
        expect(r.get(tp).offset() == cut, "earliestLocal after deleteRecords " + r.get(tp));
        r = admin.listOffsets(Map.of(tp, OffsetSpec.latestTiered())).all().get();
        expect(r.get(tp).offset() == -1, "latestTiered " + r.get(tp));
        // KIP-1023 (ListOffsets v11, Kafka 4.2): nothing waits for upload either.
        r = admin.listOffsets(Map.of(tp, OffsetSpec.earliestPendingUpload())).all().get();
        expect(r.get(tp).offset() == -1, "earliestPendingUpload " + r.get(tp));
        try (KafkaConsumer<String, String> c = consumer(props("auto.offset.reset", "earliest"))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = readAll(c, (int) (count - cut));
            expect(got.size() == count - cut && got.get(0).offset() == cut,
                    "after deleteRecords read " + got.size() + " from " + (got.isEmpty() ? -1 : got.get(0).offset()));
        }
        ok("deleteRecords before " + cut + ": earliest and earliestLocal move, a consumer from the start reads from "
                + cut + "; latestTiered and earliestPendingUpload -1");

        // Partitions can be added; the topic can be deleted.
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
        eventually(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                .partitions().size() == 4, "4 partitions described after createPartitions");
        ok("createPartitions to 4");
    }

    static void groupsAdmin(Admin admin, String topic) throws Exception {
        Collection<GroupListing> groups = admin.listGroups().all().get();
        Set<String> ids = groups.stream().map(GroupListing::groupId).collect(Collectors.toSet());
        String classic = "java-classic-" + RUN;
        expect(ids.contains(classic), "listGroups lists " + classic + ": " + ids);
        TopicPartition tp = new TopicPartition(topic, 0);
        admin.alterConsumerGroupOffsets(classic, Map.of(tp, new OffsetAndMetadata(1))).all().get();
        OffsetAndMetadata om = admin.listConsumerGroupOffsets(classic).partitionsToOffsetAndMetadata().get().get(tp);
        expect(om.offset() == 1, "after alterConsumerGroupOffsets: " + om);
        admin.deleteConsumerGroupOffsets(classic, Set.of(tp)).all().get();
        om = admin.listConsumerGroupOffsets(classic).partitionsToOffsetAndMetadata().get().get(tp);
        expect(om == null, "after deleteConsumerGroupOffsets: " + om);
        admin.deleteConsumerGroups(List.of(classic)).all().get();
        ids = admin.listGroups().all().get().stream().map(GroupListing::groupId).collect(Collectors.toSet());
        expect(!ids.contains(classic), "deleted group still listed");
        ok("listGroups, alterConsumerGroupOffsets, deleteConsumerGroupOffsets, deleteConsumerGroups");

        admin.deleteTopics(List.of(topic)).all().get();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (admin.listTopics().names().get().contains(topic) && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
        expect(!admin.listTopics().names().get().contains(topic), "deleted topic still listed");
        ok("deleteTopics");
    }

    /** KIP-848 regular expressions (evaluated by the broker), a record over
     *  `message.max.bytes`, and the last stable offset under an open transaction. */
    static void moreClients(Admin admin) throws Exception {
        String prefix = "java-re-" + RUN + "-";
        createTopic(admin, prefix + "a", 1, null);
        createTopic(admin, prefix + "b", 2, null);
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (String t : List.of("a", "b")) {
                for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(prefix + t, "k" + i, t + i));
            }
        }
        try (KafkaConsumer<String, String> c = consumer(props("group.id", "java-re-" + RUN,
                "group.protocol", "consumer", "auto.offset.reset", "earliest"))) {
            // SubscriptionPattern is resolved by the broker (RE2J in Kafka); a java.util.regex
            // Pattern would be resolved by the client against its metadata instead.
            c.subscribe(new SubscriptionPattern(prefix + ".*"));
            Set<String> got = readAll(c, 20).stream().map(ConsumerRecord::value).collect(Collectors.toSet());
            expect(got.size() == 20, "regex subscription read " + got);
            // A topic created later that matches joins the subscription.
            createTopic(admin, prefix + "c", 1, null);
            try (KafkaProducer<String, String> p = producer(new Properties())) {
                for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(prefix + "c", "k" + i, "c" + i));
            }
            Set<String> later = readAll(c, 10).stream().map(ConsumerRecord::value).collect(Collectors.toSet());
            expect(later.size() == 10 && later.contains("c0"), "the new topic's records: " + later);
        }
        ok("KIP-848 regex subscription: 2 matching topics read, a third created later joins");

        String big = "java-big-" + RUN;
        createTopic(admin, big, 1, null);
        try (KafkaProducer<String, String> p = producer(props("max.request.size", "3145728"))) {
            try {
                p.send(new ProducerRecord<>(big, "k", "x".repeat(2 << 20))).get();
                expect(false, "a 2 MiB record was accepted over message.max.bytes");
            } catch (ExecutionException e) {
                expect(e.getCause() instanceof RecordTooLargeException, "2 MiB record: " + e.getCause());
            }
            RecordMetadata md = p.send(new ProducerRecord<>(big, "k", "small")).get();
            expect(md.offset() == 0, "the next record at " + md.offset());
        }
        ok("a 2 MiB record: RecordTooLargeException; the next record is written at offset 0");

        String lso = "java-lso-" + RUN;
        createTopic(admin, lso, 1, null);
        TopicPartition tp = new TopicPartition(lso, 0);
        try (KafkaProducer<String, String> plain = producer(new Properties());
             KafkaProducer<String, String> tx = producer(props("transactional.id", "java-lso-" + RUN))) {
            for (int i = 0; i < 5; i++) plain.send(new ProducerRecord<>(lso, "p" + i)).get();
            tx.initTransactions();
            tx.beginTransaction();
            tx.send(new ProducerRecord<>(lso, "open")).get();
            for (int i = 5; i < 8; i++) plain.send(new ProducerRecord<>(lso, "p" + i)).get();
            try (KafkaConsumer<String, String> rc = consumer(props("isolation.level", "read_committed"));
                 KafkaConsumer<String, String> ru = consumer(new Properties())) {
                long committedEnd = rc.endOffsets(List.of(tp)).get(tp);
                long end = ru.endOffsets(List.of(tp)).get(tp);
                expect(committedEnd == 5 && end == 9, "end offsets under an open transaction: read_committed "
                        + committedEnd + ", read_uncommitted " + end);
                rc.assign(List.of(tp));
                rc.seekToBeginning(List.of(tp));
                List<ConsumerRecord<String, String>> got = readAll(rc, 5);
                expect(got.size() == 5 && rc.poll(Duration.ofMillis(500)).isEmpty(),
                        "read_committed read past the open transaction");
                tx.commitTransaction();
                long after = rc.endOffsets(List.of(tp)).get(tp);
                expect(after == 10, "read_committed end offset after the commit: " + after);
                List<String> rest = readAll(rc, 4).stream().map(ConsumerRecord::value).collect(Collectors.toList());
                expect(rest.equals(List.of("open", "p5", "p6", "p7")), "after the commit: " + rest);
            }
        }
        ok("an open transaction holds read_committed at the last stable offset (5 of 9), its commit releases it");
    }

    /**
     * A hanging transaction (KIP-664), found and aborted as `kafka-transactions.sh find-hanging`
     * and `abort` do: DescribeProducers shows the open transaction's first offset and holds the
     * last stable offset there; Admin.abortTransaction writes an abort marker to the partition
     * (WriteTxnMarkers from a client, at the producer's epoch and the coordinator epoch the
     * partition last saw), which releases read_committed readers and hides the record.
     */
    static void hangingTransaction(Admin admin) throws Exception {
        String topic = "java-hang-" + RUN;
        createTopic(admin, topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> tx = producer(props("transactional.id", "java-hang-" + RUN))) {
            tx.initTransactions();
            tx.beginTransaction();
            tx.send(new ProducerRecord<>(topic, "committed")).get();
            tx.commitTransaction();
            tx.beginTransaction();
            tx.send(new ProducerRecord<>(topic, "hanging")).get();
            List<ProducerState> producers = admin.describeProducers(List.of(tp)).partitionResult(tp)
                    .get(10, TimeUnit.SECONDS).activeProducers();
            expect(producers.size() == 1 && producers.get(0).currentTransactionStartOffset().isPresent(),
                    "describeProducers shows the open transaction: " + producers);
            ProducerState open = producers.get(0);
            long start = open.currentTransactionStartOffset().getAsLong();
            ListOffsetsOptions committed = new ListOffsetsOptions(IsolationLevel.READ_COMMITTED);
            long lso = admin.listOffsets(Map.of(tp, OffsetSpec.latest()), committed).partitionResult(tp).get().offset();
            expect(start == 2 && lso == start, "the open transaction starts at 2 (" + start + ") and holds the LSO (" + lso + ")");

            admin.abortTransaction(new AbortTransactionSpec(tp, open.producerId(), (short) open.producerEpoch(),
                    open.coordinatorEpoch().orElse(0))).all().get(10, TimeUnit.SECONDS);
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset();
            long released = admin.listOffsets(Map.of(tp, OffsetSpec.latest()), committed).partitionResult(tp).get().offset();
            expect(end == 4 && released == end, "after the abort marker the LSO is the log end: " + released + " of " + end);
            expect(admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers().stream()
                    .allMatch(s -> s.currentTransactionStartOffset().isEmpty()), "no open transaction is left");
            try (KafkaConsumer<String, String> rc = consumer(props("isolation.level", "read_committed"))) {
                rc.assign(List.of(tp));
                rc.seekToBeginning(List.of(tp));
                List<String> got = readAll(rc, 1).stream().map(ConsumerRecord::value).collect(Collectors.toList());
                rc.poll(Duration.ofMillis(500)).forEach(r -> got.add(r.value()));
                expect(got.equals(List.of("committed")), "read_committed after the abort: " + got);
            }
            // The producer's own end of the transaction: the coordinator still holds it open.
            tx.abortTransaction();
        }
        ok("a hanging transaction: describeProducers found it at offset 2 holding the LSO, abortTransaction "
                + "(WriteTxnMarkers) released it, read_committed sees only the committed record");
    }

    /** The rest of the admin client's surface: quorum, log dirs, transactions, quotas, SCRAM
     *  users, dynamic broker configs and loggers; on a cluster, a reassignment and an election. */
    static void moreAdmin(Admin admin, String topic) throws Exception {
        QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
        int nodes = admin.describeCluster().nodes().get().size();
        expect(q.leaderId() >= 0 && q.voters().size() == nodes, "describeMetadataQuorum: " + q);
        ok("describeMetadataQuorum: leader " + q.leaderId() + ", " + q.voters().size() + " voter(s)");
        // A PLAINTEXT connection may not ask for tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
        expectNoTokens(admin, UnsupportedByAuthenticationException.class, "over PLAINTEXT");

        List<Integer> ids = admin.describeCluster().nodes().get().stream().map(Node::id).collect(Collectors.toList());
        Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(ids).allDescriptions().get();
        long replicas = dirs.values().stream().flatMap(m -> m.values().stream())
                .flatMap(d -> d.replicaInfos().keySet().stream()).filter(tp -> tp.topic().equals(topic)).count();
        expect(replicas == 3L * rf.orElse((short) 1), "describeLogDirs: " + replicas + " replicas of " + topic
                + ": " + dirs.entrySet().stream().map(e -> e.getKey() + "=" + e.getValue().values().stream()
                .map(d -> d.replicaInfos().keySet().toString()).collect(Collectors.joining()))
                .collect(Collectors.joining("; ")));
        ok("describeLogDirs: " + replicas + " replicas of " + topic + " over " + dirs.size() + " node(s)");

        // kafka-reassign-partitions.sh --reassignment-json-file with "log_dirs": each replica moved
        // into the directory it is in (a Sluice broker has one) is done at once; another path
        // is refused with LogDirNotFoundException.
        Map<TopicPartitionReplica, String> moves = new HashMap<>();
        dirs.forEach((node, byDir) -> byDir.forEach((dir, d) -> d.replicaInfos().keySet().stream()
                .filter(tp -> tp.topic().equals(topic))
                .forEach(tp -> moves.put(new TopicPartitionReplica(topic, tp.partition(), node), dir))));
        admin.alterReplicaLogDirs(moves).all().get();
        Map<TopicPartitionReplica, DescribeReplicaLogDirsResult.ReplicaLogDirInfo> where =
                admin.describeReplicaLogDirs(moves.keySet()).all().get();
        for (Map.Entry<TopicPartitionReplica, String> m : moves.entrySet()) {
            expect(m.getValue().equals(where.get(m.getKey()).getCurrentReplicaLogDir()),
                    "describeReplicaLogDirs: " + m.getKey() + " in " + where.get(m.getKey()));
        }
        TopicPartitionReplica first = moves.keySet().iterator().next();
        try {
            admin.alterReplicaLogDirs(Map.of(first, "/no/such/log/dir")).all().get();
            expect(false, "alterReplicaLogDirs to a directory the broker does not have succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof LogDirNotFoundException, "alterReplicaLogDirs: " + e.getCause());
        }
        // kafka-cluster.sh unregister of an id no broker registered.
        try {
            admin.unregisterBroker(99).all().get();
            expect(false, "unregisterBroker(99) succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof BrokerIdNotRegisteredException, "unregisterBroker(99): " + e.getCause());
        }
        ok("unregisterBroker of an unknown id: BrokerIdNotRegisteredException");
        ok("alterReplicaLogDirs and describeReplicaLogDirs: " + moves.size() + " replica(s) in their log dir; "
                + "another path refused with LogDirNotFoundException");

        // KIP-1066 (Kafka 4.3): cordon a broker's log directories (kafka-configs.sh --entity-type
        // brokers --entity-name N --add-config cordoned.log.dirs=*): describeLogDirs says so, no
        // replica moves into it, and no new topic needs it; then uncordon.
        int node = first.brokerId();
        ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(node));
        admin.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                new ConfigEntry("cordoned.log.dirs", "*"), AlterConfigOp.OpType.SET)))).all().get();
        LogDirDescription cordonedDir = admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node)
                .values().iterator().next();
        expect(cordonedDir.isCordoned(), "describeLogDirs after cordoning: " + cordonedDir);
        try {
            admin.alterReplicaLogDirs(Map.of(first, moves.get(first))).all().get();
            expect(false, "alterReplicaLogDirs into a cordoned directory succeeded");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof InvalidReplicaAssignmentException, "alterReplicaLogDirs into a cordoned dir: " + e.getCause());
        }
        String everywhere = topic + "-everywhere";
        eventually(() -> {
            try {
                admin.createTopics(List.of(new NewTopic(everywhere, 1, (short) ids.size()))).all().get();
                // Created by a node that had not seen the cordon yet: again.
                admin.deleteTopics(List.of(everywhere)).all().get();
                return false;
            } catch (ExecutionException e) {
                expect(e.getCause() instanceof InvalidReplicationFactorException, "createTopics with a cordoned broker: " + e.getCause());
                return true;
            }
        }, "createTopics refused while broker " + node + " is cordoned");
        admin.incrementalAlterConfigs(Map.of(br, List.of(new AlterConfigOp(
                new ConfigEntry("cordoned.log.dirs", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        expect(!admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node).values().iterator().next().isCordoned(),
                "describeLogDirs after uncordoning");
        eventually(() -> {
            try {
                admin.createTopics(List.of(new NewTopic(everywhere, 1, (short) ids.size()))).all().get();
                return true;
            } catch (ExecutionException e) {
                return false;
            }
        }, "createTopics once broker " + node + " is uncordoned");
        admin.deleteTopics(List.of(everywhere)).all().get();
        ok("cordoned.log.dirs=* on broker " + node + ": describeLogDirs isCordoned, alterReplicaLogDirs into it "
                + "InvalidReplicaAssignmentException, createTopics InvalidReplicationFactorException; uncordoned, created");

        Collection<TransactionListing> txns = admin.listTransactions().all().get();
        String txid = "java-tx-" + RUN;
        expect(txns.stream().anyMatch(t -> t.transactionalId().equals(txid)), "listTransactions: " + txns);
        TransactionDescription td = admin.describeTransactions(List.of(txid)).all().get().get(txid);
        expect(td.state() == TransactionState.COMPLETE_COMMIT, "describeTransactions: " + td);
        ok("listTransactions and describeTransactions: " + txid + " " + td.state());

        ClientQuotaEntity user = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "java-" + RUN));
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(user,
                List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))))).all().get();
        eventually(() -> Double.valueOf(1048576.0).equals(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(
                List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "java-" + RUN))))
                .entities().get().getOrDefault(user, Map.of()).get("producer_byte_rate")), "describeClientQuotas");
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(user,
                List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all().get();
        ok("alterClientQuotas and describeClientQuotas: producer_byte_rate for a user set and removed");

        String scramUser = "java-" + RUN;
        admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(scramUser,
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "secret"))).all().get();
        eventually(() -> {
            try {
                UserScramCredentialsDescription d = admin.describeUserScramCredentials(List.of(scramUser))
                        .description(scramUser).get();
                return d.credentialInfos().size() == 1
                        && d.credentialInfos().get(0).mechanism() == ScramMechanism.SCRAM_SHA_256
                        && d.credentialInfos().get(0).iterations() == 8192;
            } catch (ExecutionException e) {
                return false;
            }
        }, "describeUserScramCredentials lists " + scramUser);
        admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(scramUser,
                ScramMechanism.SCRAM_SHA_256))).all().get();
        ok("alterUserScramCredentials and describeUserScramCredentials: SCRAM-SHA-256 added and deleted");

        // A dynamic cluster-wide broker default, set and removed.
        ConfigResource defaults = new ConfigResource(ConfigResource.Type.BROKER, "");
        ConfigResource one = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(ids.get(0)));
        admin.incrementalAlterConfigs(Map.of(defaults, List.of(new AlterConfigOp(
                new ConfigEntry("log.retention.ms", "172800000"), AlterConfigOp.OpType.SET)))).all().get();
        eventually(() -> {
            ConfigEntry e = admin.describeConfigs(List.of(one)).all().get().get(one).get("log.retention.ms");
            return e != null && e.value().equals("172800000")
                    && e.source() == ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG;
        }, "log.retention.ms as a dynamic default on broker " + ids.get(0));
        try {
            admin.incrementalAlterConfigs(Map.of(one, List.of(new AlterConfigOp(
                    new ConfigEntry("log.dirs", "/elsewhere"), AlterConfigOp.OpType.SET)))).all().get();
            expect(false, "log.dirs changed at runtime");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof InvalidRequestException || e.getCause() instanceof InvalidConfigurationException,
                    "log.dirs: " + e.getCause());
        }
        admin.incrementalAlterConfigs(Map.of(defaults, List.of(new AlterConfigOp(
                new ConfigEntry("log.retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        ok("incrementalAlterConfigs on BROKER \"\": log.retention.ms a dynamic default on broker "
                + ids.get(0) + ", then removed; log.dirs refused");
        // Eligible leader replicas (on by default, as in Kafka 4.1) need one min.insync.replicas
        // for the whole cluster: the cluster default holds it, a broker's own is refused.
        eventually(() -> {
            ConfigEntry e = admin.describeConfigs(List.of(defaults)).all().get().get(defaults).get("min.insync.replicas");
            return e != null && e.source() == ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG;
        }, "min.insync.replicas in the cluster default");
        try {
            admin.incrementalAlterConfigs(Map.of(one, List.of(new AlterConfigOp(
                    new ConfigEntry("min.insync.replicas", "2"), AlterConfigOp.OpType.SET)))).all().get();
            expect(false, "a broker-level min.insync.replicas was stored while ELR is on");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof InvalidConfigurationException && e.getCause().getMessage()
                    .contains("Broker-level min.insync.replicas cannot be altered while ELR is enabled."),
                    "min.insync.replicas on broker " + ids.get(0) + ": " + e.getCause());
        }
        ok("min.insync.replicas: a DYNAMIC_DEFAULT_BROKER_CONFIG, and refused on broker " + ids.get(0));

        ConfigResource logger = new ConfigResource(ConfigResource.Type.BROKER_LOGGER, String.valueOf(ids.get(0)));
        Config loggers = admin.describeConfigs(List.of(logger)).all().get().get(logger);
        expect(!loggers.entries().isEmpty(), "BROKER_LOGGER lists loggers");
        String name = loggers.entries().iterator().next().name();
        admin.incrementalAlterConfigs(Map.of(logger, List.of(new AlterConfigOp(
                new ConfigEntry(name, "DEBUG"), AlterConfigOp.OpType.SET)))).all().get();
        ConfigEntry level = admin.describeConfigs(List.of(logger)).all().get().get(logger).get(name);
        expect(level.value().equals("DEBUG"), "logger " + name + " at " + level.value());
        admin.incrementalAlterConfigs(Map.of(logger, List.of(new AlterConfigOp(
                new ConfigEntry(name, ""), AlterConfigOp.OpType.DELETE)))).all().get();
        ok("BROKER_LOGGER: " + loggers.entries().size() + " loggers, " + name + " set to DEBUG and back");

        if (rf.isEmpty() || nodes < 3) return;
        // Reorder partition 0's replicas so another node is preferred, then elect it.
        TopicPartition tp = new TopicPartition(topic, 0);
        TopicPartitionInfo before = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(0);
        List<Integer> order = before.replicas().stream().map(Node::id).collect(Collectors.toList());
        Collections.rotate(order, 1);
        admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(order)))).all().get();
        eventually(() -> admin.listPartitionReassignments().reassignments().get().isEmpty()
                && admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(0)
                .replicas().stream().map(Node::id).collect(Collectors.toList()).equals(order),
                "replicas reordered to " + order);
        int preferred = order.get(0);
        if (before.leader().id() != preferred) {
            admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all().get();
        }
        eventually(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().get(0)
                .leader().id() == preferred, "node " + preferred + " leads after electLeaders");
        ok("alterPartitionReassignments to " + order + ", listPartitionReassignments, electLeaders(PREFERRED): node "
                + preferred + " leads");
    }

    /**
     * The default producer (idempotent, acks=all, retries within delivery.timeout.ms) writes
     * to a partition of replication factor 3 while the node leading it is killed (SIGKILL, by
     * pid): every record is acknowledged once the new leader takes over, and the partition
     * then holds each acknowledged record once, at the offset it was acknowledged with.
     */
    static void failover(Admin admin, Map<Integer, Long> pids) throws Exception {
        String topic = "java-failover-" + RUN;
        createTopic(admin, topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        int n = 20000;
        Map<Long, String> acked = new ConcurrentHashMap<>();
        List<Exception> errors = Collections.synchronizedList(new ArrayList<>());
        // A consumer group reads another topic meanwhile, its coordinator on the same node.
        String read = "java-failover-read-" + RUN;
        createTopic(admin, read, 3, null);
        int m = 3000;
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < m; i++) p.send(new ProducerRecord<>(read, "k" + i, "v" + i));
        }
        String txTopic = "java-failover-txn-" + RUN;
        createTopic(admin, txTopic, 1, null);
        String txid;
        KafkaProducer<String, String> tx;
        int killed;
        String group;
        String group848;
        Set<String> seen = new HashSet<>();
        Set<String> seen848 = new HashSet<>();
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            for (int i = 0; i < n / 4; i++) send(p, topic, i, acked, errors);
            p.flush();
            killed = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions().get(0).leader().id();
            group = idCoordinatedBy(admin, "__consumer_offsets", "java-fo-" + RUN + "-", killed);
            // And a KIP-848 group, whose coordinator is on that node as well.
            group848 = idCoordinatedBy(admin, "__consumer_offsets", "java-fo848-" + RUN + "-", killed);
            try (KafkaConsumer<String, String> c = consumer(props("group.id", group,
                    "auto.offset.reset", "earliest", "max.poll.records", "100"));
                 KafkaConsumer<String, String> c848 = consumer(props("group.id", group848, "group.protocol", "consumer",
                    "auto.offset.reset", "earliest", "max.poll.records", "100"))) {
                c.subscribe(List.of(read));
                c848.subscribe(List.of(read));
                // And a transaction is open across the kill, its coordinator on that node too.
                txid = idCoordinatedBy(admin, "__transaction_state", "java-fo-tx-" + RUN + "-", killed);
                tx = producer(props("transactional.id", txid));
                tx.initTransactions();
                tx.beginTransaction();
                for (int i = 0; i < 100; i++) tx.send(new ProducerRecord<>(txTopic, "t" + i, "before-" + i));
                tx.flush();
                long before = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while ((seen.size() < m / 3 || seen848.size() < m / 3) && System.nanoTime() < before) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) seen.add(r.value());
                    for (ConsumerRecord<String, String> r : c848.poll(Duration.ofMillis(100))) seen848.add(r.value());
                    c.commitSync();
                    c848.commitSync();
                }
                expect(seen.size() >= m / 3 && seen848.size() >= m / 3, "both groups read before the kill: "
                        + seen.size() + " and " + seen848.size());
                expect(ProcessHandle.of(pids.get(killed)).map(ProcessHandle::destroyForcibly).orElse(false),
                        "kill -9 of node " + killed);
                for (int i = n / 4; i < n; i++) send(p, topic, i, acked, errors);
                // The group's coordinator moves; the consumer finds it, and commits there.
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
                while ((seen.size() < m || seen848.size() < m) && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) seen.add(r.value());
                    for (ConsumerRecord<String, String> r : c848.poll(Duration.ofMillis(100))) seen848.add(r.value());
                }
                c.commitSync(Duration.ofSeconds(60));
                c848.commitSync(Duration.ofSeconds(60));
            }
            p.flush();
        }
        // The transaction goes on with its new coordinator, which has its state from the
        // replicated __transaction_state, and commits.
        for (int i = 0; i < 100; i++) tx.send(new ProducerRecord<>(txTopic, "t" + i, "after-" + i));
        tx.commitTransaction();
        tx.close();
        try (KafkaConsumer<String, String> c = consumer(props("auto.offset.reset", "earliest",
                "isolation.level", "read_committed"))) {
            c.assign(List.of(new TopicPartition(txTopic, 0)));
            List<ConsumerRecord<String, String>> got = readAll(c, 200);
            expect(got.size() == 200 && got.get(0).value().equals("before-0")
                    && got.get(199).value().equals("after-99"), "read_committed after the failover: "
                    + got.size() + " records");
        }
        TransactionDescription td = admin.describeTransactions(List.of(txid)).all().get().get(txid);
        expect(td.coordinatorId() != killed && td.state() == TransactionState.COMPLETE_COMMIT,
                "transaction after the failover: " + td);
        ok("failover: transaction " + txid + " (coordinated by node " + killed + ") open across the kill, "
                + "committed through node " + td.coordinatorId() + ", all 200 records read_committed");
        for (Map.Entry<String, Set<String>> g : Map.of(group, seen, group848, seen848).entrySet()) {
            String id = g.getKey();
            expect(g.getValue().size() == m, "group " + id + " read " + g.getValue().size() + " of " + m + " across the failover");
            Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(id).partitionsToOffsetAndMetadata().get();
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            expect(total == m, "group " + id + ": committed offsets sum to " + total + ": " + committed);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(id)).all().get().get(id);
            expect(d.coordinator().id() != killed, "coordinator still " + d.coordinator());
            ok("failover: " + d.type() + " group " + id + " (coordinated by node " + killed + ") read all " + m
                    + " and committed the end offsets at node " + d.coordinator().id());
        }
        expect(errors.isEmpty(), "sends failed across the failover: " + errors.subList(0, Math.min(3, errors.size())));
        expect(acked.size() == n, "acknowledged " + acked.size() + " of " + n);
        int leader = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                .partitions().get(0).leader().id();
        expect(leader != killed, "leader still " + killed);
        expectAcknowledged(tp, acked);
        ok("failover: node " + killed + " (the leader) killed after " + (n / 4) + " of " + n
                + " records; all acknowledged, node " + leader + " leads, each record once at its offset");
    }

    /** An id (`prefix` and a number) whose coordinator is `node`: Kafka places a group or a
     *  transactional id on the leader of partition abs(hashCode) % partitions of its internal
     *  topic (`__consumer_offsets`, `__transaction_state`). */
    static String idCoordinatedBy(Admin admin, String internal, String prefix, int node) throws Exception {
        TopicDescription td = retrying(() -> admin.describeTopics(List.of(internal)).allTopicNames().get()
                .get(internal), "describe " + internal);
        for (int k = 0; k < 10000; k++) {
            String id = prefix + k;
            int h = id.hashCode();
            int partition = (h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % td.partitions().size();
            Node leader = td.partitions().stream().filter(i -> i.partition() == partition)
                    .findFirst().orElseThrow().leader();
            if (leader != null && leader.id() == node) return id;
        }
        expect(false, "no id placed on node " + node + " in " + internal);
        return null;
    }

    /** Reads `tp` from its start: exactly the acknowledged records, each at its offset. */
    static void expectAcknowledged(TopicPartition tp, Map<Long, String> acked) {
        try (KafkaConsumer<String, String> c = consumer(props("auto.offset.reset", "earliest"))) {
            c.assign(List.of(tp));
            List<ConsumerRecord<String, String>> got = readAll(c, acked.size());
            expect(got.size() == acked.size(), tp + ": read " + got.size() + " of " + acked.size()
                    + " records (duplicates or loss)");
            for (ConsumerRecord<String, String> r : got) {
                expect(r.value().equals(acked.get(r.offset())), "offset " + r.offset() + " of " + tp
                        + " holds " + r.value() + ", acknowledged " + acked.get(r.offset()));
            }
        }
    }

    static void send(KafkaProducer<String, String> p, String topic, int i, Map<Long, String> acked,
                     List<Exception> errors) {
        String v = "v" + i;
        p.send(new ProducerRecord<>(topic, 0, "k" + i, v), (md, e) -> {
            if (e != null) errors.add(e);
            else if (acked.putIfAbsent(md.offset(), v) != null) errors.add(new IllegalStateException("offset " + md.offset() + " acknowledged twice"));
        });
    }

    /**
     * SASL_SSL (a PEM CA as truststore, KIP-651): an admin over PLAIN creates a SCRAM-SHA-512
     * user, whose producer and consumer then work over SCRAM with default settings. The broker
     * ends sessions after `connections.max.reauth.ms`; the Java client re-authenticates on its
     * connection (KIP-368), which its metrics count. A wrong password is refused.
     */
    static void sasl(String ca) throws Exception {
        Properties tls = props("security.protocol", "SASL_SSL", "ssl.truststore.type", "PEM",
                "ssl.truststore.location", ca);
        Properties plain = new Properties();
        plain.putAll(tls);
        plain.putAll(props("sasl.mechanism", "PLAIN", "sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\";"));
        Properties scram = new Properties();
        scram.putAll(tls);
        scram.putAll(props("sasl.mechanism", "SCRAM-SHA-512", "sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"bob\" password=\"bob-secret\";"));
        String topic = "java-sasl-" + RUN;
        Properties adminProps = base();
        adminProps.putAll(plain);
        try (Admin admin = Admin.create(adminProps)) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("bob",
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "bob-secret"))).all().get();
            createTopic(admin, topic, 1, null);
        }
        ok("admin over SASL_SSL/PLAIN: SCRAM-SHA-512 user bob and topic " + topic);
        try (Admin admin = Admin.create(adminProps)) {
            expectNoTokens(admin, DelegationTokenDisabledException.class, "over SASL_SSL");
        }

        int n = 40;
        try (KafkaProducer<String, String> p = producer(scram)) {
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, "k" + i, "v" + i);
                r.headers().add("seq", Integer.toString(i).getBytes());
                p.send(r).get();
                Thread.sleep(100); // 4 s of sends: sessions of 1.5 s end twice or more
            }
            double reauth = metric(p.metrics(), "successful-reauthentication-total");
            double failed = metric(p.metrics(), "failed-reauthentication-total");
            expect(reauth >= 2 && failed == 0, "re-authentications: " + reauth + " succeeded, " + failed + " failed");
            ok("producer over SASL_SSL/SCRAM-SHA-512: " + n + " records acknowledged across " + (long) reauth
                    + " re-authentications (KIP-368), none failed");
        }
        checkRecords(readFromStart(scram, topic, n), n, "consumer over SASL_SSL/SCRAM-SHA-512");
        ok("consumer over SASL_SSL/SCRAM-SHA-512: all " + n + " back");

        Properties wrong = new Properties();
        wrong.putAll(scram);
        wrong.put("sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"bob\" password=\"guess\";");
        expectRefused(wrong, SaslAuthenticationException.class, "a wrong SCRAM password");
        ok("a wrong SCRAM password: SaslAuthenticationException");

        // OAUTHBEARER with the client's default login handler: an unsecured JWT for its subject.
        Properties oauth = new Properties();
        oauth.putAll(tls);
        oauth.putAll(props("sasl.mechanism", "OAUTHBEARER", "sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"carol\";"));
        double oauthReauth;
        try (KafkaProducer<String, String> p = producer(oauth)) {
            for (int i = n; i < n + 20; i++) {
                p.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
                Thread.sleep(100); // 2 s of sends: the 1.5 s session ends once or more
            }
            oauthReauth = metric(p.metrics(), "successful-reauthentication-total");
            double failed = metric(p.metrics(), "failed-reauthentication-total");
            expect(oauthReauth >= 1 && failed == 0, "OAUTHBEARER re-authentications: " + oauthReauth + " succeeded, "
                    + failed + " failed");
        }
        List<ConsumerRecord<String, String>> got = readFromStart(oauth, topic, n + 20);
        expect(got.size() == n + 20 && got.get(n + 19).value().equals("v" + (n + 19)),
                "consumer over SASL_SSL/OAUTHBEARER read " + got.size() + " of " + (n + 20));
        ok("OAUTHBEARER (an unsecured JWT, the client's default login handler) over SASL_SSL: 20 records "
                + "written across " + (long) oauthReauth + " re-authentication(s), all " + (n + 20) + " read back");
    }

    /** SSL with a client certificate from a PEM keystore; without one the broker refuses. */
    static void mutualTls(String mtlsAddr, String ca, String keystore) throws Exception {
        addr = mtlsAddr;
        Properties tls = props("security.protocol", "SSL", "ssl.truststore.type", "PEM",
                "ssl.truststore.location", ca, "ssl.keystore.type", "PEM", "ssl.keystore.location", keystore);
        String topic = "java-mtls-" + RUN;
        Properties adminProps = base();
        adminProps.putAll(tls);
        try (Admin admin = Admin.create(adminProps)) {
            expect(admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).iterator().next().port()
                    == Integer.parseInt(mtlsAddr.split(":")[1]), "describeCluster names the mutual-TLS listener");
            createTopic(admin, topic, 1, null);
        }
        int n = 100;
        try (KafkaProducer<String, String> p = producer(tls)) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
        }
        List<ConsumerRecord<String, String>> got = readFromStart(tls, topic, n);
        expect(got.size() == n && got.get(n - 1).value().equals("v" + (n - 1)),
                "consumer over mutual TLS read " + got.size() + " of " + n);
        ok("mutual TLS (a PEM keystore with the client's certificate): admin, " + n + " records written and read");

        expectRefused(props("security.protocol", "SSL", "ssl.truststore.type", "PEM", "ssl.truststore.location", ca),
                SslAuthenticationException.class, "a client without a certificate");
        ok("without a client certificate: SslAuthenticationException");
    }

    static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        return metrics.entrySet().stream().filter(e -> e.getKey().name().equals(name))
                .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue()).sum();
    }

    /**
     * The default producer writes 30,000 records at about 5,000 a second while test_java.sh
     * kills its broker (kill -9) and starts it again on the same data: every record is
     * acknowledged within delivery.timeout.ms, and the partition then holds each once, at the
     * offset it was acknowledged with (the broker recovered the producer's sequences).
     */
    static void restart(String topic) throws Exception {
        int n = 30000;
        Map<Long, String> acked = new ConcurrentHashMap<>();
        List<Exception> errors = Collections.synchronizedList(new ArrayList<>());
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            long start = System.nanoTime();
            for (int i = 0; i < n; i++) {
                send(p, topic, i, acked, errors);
                if (i % 50 == 49) {
                    long due = start + TimeUnit.MILLISECONDS.toNanos(i / 5);
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            p.flush();
        }
        expect(errors.isEmpty(), "sends failed across the restart: " + errors.subList(0, Math.min(3, errors.size())));
        expect(acked.size() == n, "acknowledged " + acked.size() + " of " + n);
        expectAcknowledged(new TopicPartition(topic, 0), acked);
        ok("broker kill -9 and restart under the default producer: all " + n
                + " records acknowledged, each once at its offset");
    }

    /**
     * A rolling restart (test_java.sh stops each node with SIGTERM, a controlled shutdown, and
     * starts it again, one at a time) under the default producer and a classic consumer group,
     * on a topic of 3 partitions with replication factor 3 and min.insync.replicas=2. The
     * producer writes until `stopFile` exists; then every record is acknowledged, each is in
     * its partition once at its acknowledged offset, and the group read all of them.
     */
    static void rolling(String topic, java.nio.file.Path stopFile) throws Exception {
        rf = Optional.of((short) 3);
        try (Admin admin = Admin.create(base())) {
            createTopic(admin, topic, 3, Map.of("min.insync.replicas", "2"));
            retrying(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic),
                    "describe " + topic);
        }
        Map<TopicPartition, Map<Long, String>> acked = new ConcurrentHashMap<>();
        List<Exception> errors = Collections.synchronizedList(new ArrayList<>());
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch stop = new CountDownLatch(1);
        ExecutorService ex = Executors.newSingleThreadExecutor();
        Future<?> reader = ex.submit(() -> {
            try (KafkaConsumer<String, String> c = consumer(props("group.id", "java-rolling-" + RUN,
                    "auto.offset.reset", "earliest"))) {
                c.subscribe(List.of(topic));
                while (!stop.await(0, TimeUnit.MILLISECONDS)) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) seen.add(r.value());
                }
            }
            return null;
        });
        int sent = 0;
        try (KafkaProducer<String, String> p = producer(new Properties())) {
            long start = System.nanoTime();
            long limit = start + TimeUnit.SECONDS.toNanos(180);
            while (!java.nio.file.Files.exists(stopFile) && System.nanoTime() < limit) {
                String v = "r" + sent;
                p.send(new ProducerRecord<>(topic, "k" + sent, v), (md, e) -> {
                    if (e != null) errors.add(e);
                    else acked.computeIfAbsent(new TopicPartition(md.topic(), md.partition()),
                            tp -> new ConcurrentHashMap<>()).put(md.offset(), v);
                });
                sent++;
                if (sent % 20 == 0) Thread.sleep(10); // about 2,000 records a second
            }
            p.flush();
        }
        expect(java.nio.file.Files.exists(stopFile), "the rolling restart did not finish within 180 s");
        expect(errors.isEmpty(), "sends failed during the rolling restart: "
                + errors.subList(0, Math.min(3, errors.size())));
        int total = acked.values().stream().mapToInt(Map::size).sum();
        expect(total == sent, "acknowledged " + total + " of " + sent);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (seen.size() < sent && System.nanoTime() < deadline) Thread.sleep(100);
        stop.countDown();
        reader.get(60, TimeUnit.SECONDS);
        ex.shutdown();
        expect(seen.size() == sent, "the group read " + seen.size() + " of " + sent);
        acked.forEach(JavaClient::expectAcknowledged);
        ok("rolling restart of 3 nodes: " + sent + " records acknowledged, each once at its offset, all read by the group");
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            expect(false, "threw " + e);
        }
        // Consumer threads of a failed check must not keep the JVM alive.
        System.exit(0);
    }

    static void run(String[] args) throws Exception {
        addr = args[0];
        if (args.length > 3 && args[1].equals("rolling")) {
            rolling(args[2], java.nio.file.Path.of(args[3]));
            return;
        }
        if (args.length > 1 && args[1].equals("share")) {
            // Only the share-group checks (for working on them).
            try (Admin admin = Admin.create(base())) {
                shareGroups(admin);
            }
            return;
        }
        if (args.length > 2 && args[1].equals("restart")) {
            restart(args[2]);
            return;
        }
        if (args.length > 4 && args[1].equals("sasl")) {
            sasl(args[2]);
            mutualTls(args[3], args[2], args[4]);
            return;
        }
        if (args.length > 1) rf = Optional.of(Short.parseShort(args[1]));
        if (args.length > 2) {
            // NODE=PID,...: the cluster's processes, for the failover check only.
            Map<Integer, Long> pids = new HashMap<>();
            for (String kv : args[2].split(",")) {
                String[] p = kv.split("=");
                pids.put(Integer.parseInt(p[0]), Long.parseLong(p[1]));
            }
            try (Admin admin = Admin.create(base())) {
                failover(admin, pids);
            }
            return;
        }
        try (Admin admin = Admin.create(base())) {
            String topic = admin(admin);
            int n = 3000;
            Map<Integer, Integer> counts = produceDefault(admin, topic, n);
            consumeClassic(admin, topic, n);
            if (rf.isPresent()) followerFetching(admin, topic);
            twoMembers(admin, n, "classic");
            twoMembers(admin, n, "consumer");
            transactions(admin);
            features(admin);
            compression(admin);
            moreAdmin(admin, topic);
            moreClients(admin);
            hangingTransaction(admin);
            offsetsAndDeletes(admin, topic, counts);
            groupsAdmin(admin, topic);
            shareGroups(admin);
        }
        System.out.println("all checks passed");
    }
}
