// Kafka Connect 4.3 (connect-runtime, see ../test_java.sh for where the jars come from) in
// distributed mode against Sluice: workers that form a Connect cluster through the broker's
// group coordinator ("connect" protocol, incremental cooperative rebalancing), keep their
// connector configs, source offsets and statuses in compacted topics they create themselves,
// and run Kafka's FileStreamSource and FileStreamSink connectors. Each worker runs its herder
// without Connect's REST server: the wheel's Jetty lacks the jetty-security 12 that server
// needs. So connectors are created through the herder's own API, as the REST server would,
// and the two endpoints workers call on their leader (a follower's task configs, and the
// fencing of a source connector's zombie tasks) are served by the JDK's HTTP server, handing
// each signed request to the herder as Connect's InternalConnectResource does.
//
// usage: java -cp 'JARS/*' ConnectClient.java HOST:PORT[,...] DIR [REPLICATION_FACTOR]
//        DIR holds the connectors' files; without REPLICATION_FACTOR the internal topics take
//        the broker's default (-1), with it Connect's defaults stand (3).
//
// Prints "ok: ..." per check and exits 1 at the first one that fails.

import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.function.Supplier;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.runtime.*;
import org.apache.kafka.connect.runtime.distributed.*;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.InternalRequestSignature;
import org.apache.kafka.connect.runtime.rest.RestClient;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorInfo;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorStateInfo;
import org.apache.kafka.connect.runtime.rest.errors.ConnectRestException;
import org.apache.kafka.connect.storage.*;
import org.apache.kafka.connect.util.FutureCallback;
import org.apache.kafka.connect.util.SharedTopicAdmin;

public class ConnectClient {
    static String addr;
    static Path dir;
    static boolean brokerDefaultRf = true;
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);

    static void expect(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.out.flush();
            System.exit(1);
        }
    }

    /** The replication factor of the topics the source connectors create (KIP-158). */
    static String topicRf() {
        return brokerDefaultRf ? "-1" : "3";
    }

    static void ok(String what) {
        System.out.println("ok: " + what);
        System.out.flush();
    }

    /** Waits up to `seconds` for `cond`, which may throw meanwhile. */
    static void eventually(int seconds, Callable<Boolean> cond, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                if (cond.call()) return;
                last = null;
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        expect(false, what + (last == null ? "" : " (last: " + last + ")"));
    }

    /** One worker of the Connect cluster `group`: what ConnectDistributed builds, less REST. */
    static final class Worker1 {
        final String name;
        final String id;
        final DistributedHerder herder;
        final HttpServer internal;

        Worker1(String group, String name, Map<String, String> extra) throws Exception {
            this.name = name;
            internal = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
            // Connect names a worker by its REST endpoint.
            id = "127.0.0.1:" + internal.getAddress().getPort();
            Map<String, String> p = new HashMap<>();
            p.put("bootstrap.servers", addr);
            p.put("group.id", group);
            p.put("config.storage.topic", group + "-configs");
            p.put("offset.storage.topic", group + "-offsets");
            p.put("status.storage.topic", group + "-status");
            if (brokerDefaultRf) {
                for (String t : List.of("config", "offset", "status")) p.put(t + ".storage.replication.factor", "-1");
            }
            p.put("key.converter", StringConverter.class.getName());
            p.put("value.converter", StringConverter.class.getName());
            p.put("offset.flush.interval.ms", "1000");
            // A departed worker's tasks wait this long for it to return before they move
            // (5 minutes by default).
            p.put("scheduled.rebalance.max.delay.ms", "1000");
            p.putAll(extra);
            Plugins plugins = new Plugins(p);
            DistributedConfig config = new DistributedConfig(p);
            Map<String, Object> adminProps = new HashMap<>(config.originals());
            adminProps.put("client.id", group + "-" + name + "-shared-admin");
            SharedTopicAdmin admin = new SharedTopicAdmin(adminProps);
            // The source offsets' keys, as ConnectDistributed reads them: JSON without schemas.
            JsonConverter keys = new JsonConverter();
            keys.configure(Map.of("schemas.enable", "false"), true);
            Supplier<String> clientIdBase = () -> group + "-" + name + "-";
            KafkaOffsetBackingStore offsets = new KafkaOffsetBackingStore(admin, clientIdBase, keys);
            offsets.configure(config);
            ConnectorClientConfigOverridePolicy policy = plugins.newPlugin(
                    config.getString(WorkerConfig.CONNECTOR_CLIENT_POLICY_CLASS_CONFIG), config,
                    ConnectorClientConfigOverridePolicy.class);
            Worker worker = new Worker(id, Time.SYSTEM, plugins, config, offsets, policy);
            Converter internalConverter = worker.getInternalValueConverter();
            StatusBackingStore status = new KafkaStatusBackingStore(Time.SYSTEM, internalConverter, admin, clientIdBase.get());
            status.configure(config);
            ConfigBackingStore configs = new KafkaConfigBackingStore(internalConverter, config, worker.configTransformer(),
                    admin, clientIdBase.get());
            herder = new DistributedHerder(config, Time.SYSTEM, worker, config.kafkaClusterId(), status, configs,
                    "http://" + id + "/", new RestClient(config), policy, List.of(), admin);
            internal.createContext("/connectors/", this::leaderEndpoint);
            internal.start();
            herder.start();
        }

        static final ObjectMapper JSON = new ObjectMapper();

        /**
         * POST /connectors/NAME/tasks (task configs from the follower that runs the connector)
         * and PUT /connectors/NAME/fence (exactly-once source), signed with the session key.
         */
        void leaderEndpoint(HttpExchange ex) throws java.io.IOException {
            String[] path = ex.getRequestURI().getPath().split("/");
            byte[] body = ex.getRequestBody().readAllBytes();
            int status = 204;
            byte[] answer = new byte[0];
            try {
                expect(path.length == 4, "an internal request for " + ex.getRequestURI());
                jakarta.ws.rs.core.HttpHeaders headers = (jakarta.ws.rs.core.HttpHeaders) Proxy.newProxyInstance(
                        getClass().getClassLoader(), new Class<?>[] {jakarta.ws.rs.core.HttpHeaders.class},
                        (proxy, method, args) -> method.getName().equals("getHeaderString")
                                ? ex.getRequestHeaders().getFirst((String) args[0]) : null);
                InternalRequestSignature signature = InternalRequestSignature.fromHeaders(Crypto.SYSTEM, body, headers);
                FutureCallback<Void> cb = new FutureCallback<>();
                if (path[3].equals("tasks")) {
                    herder.putTaskConfigs(path[2], JSON.readValue(body, new TypeReference<List<Map<String, String>>>() {}),
                            cb, signature);
                } else {
                    herder.fenceZombieSourceTasks(path[2], cb, signature);
                }
                cb.get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
                status = cause instanceof ConnectRestException c ? c.statusCode() : 500;
                answer = JSON.writeValueAsBytes(Map.of("error_code", status, "message", String.valueOf(cause)));
            }
            ex.sendResponseHeaders(status, answer.length == 0 ? -1 : answer.length);
            if (answer.length > 0) ex.getResponseBody().write(answer);
            ex.close();
        }

        /** The connectors this worker read from the config topic. */
        Collection<String> connectors() throws Exception {
            FutureCallback<Collection<String>> cb = new FutureCallback<>();
            herder.connectors(cb);
            return cb.get(10, TimeUnit.SECONDS);
        }

        void stop() {
            herder.stop();
            internal.stop(0);
        }
    }

    /**
     * Creates a connector through whichever worker leads (a follower's herder would forward
     * the request to the leader's REST server, which these workers do not run).
     */
    static void createConnector(List<Worker1> workers, String name, Map<String, String> config) throws Exception {
        Map<String, String> c = new HashMap<>(config);
        c.put("name", name);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        Exception last = null;
        while (System.nanoTime() < deadline) {
            for (Worker1 w : workers) {
                FutureCallback<Herder.Created<ConnectorInfo>> cb = new FutureCallback<>();
                w.herder.putConnectorConfig(name, c, false, cb);
                try {
                    expect(cb.get(30, TimeUnit.SECONDS).created(), name + " created");
                    return;
                } catch (ExecutionException e) {
                    last = e; // NotLeaderException, or a rebalance in progress
                }
            }
            Thread.sleep(500);
        }
        expect(false, "creating " + name + ": " + last);
    }

    /** Where each of `name`'s tasks runs, once the connector and every task are RUNNING. */
    static List<String> running(Worker1 w, String name) {
        ConnectorStateInfo s = w.herder.connectorStatus(name);
        if (!s.connector().state().equals("RUNNING") || s.tasks().isEmpty()) return null;
        List<String> on = new ArrayList<>();
        for (ConnectorStateInfo.TaskState t : s.tasks()) {
            if (!t.state().equals("RUNNING")) return null;
            on.add(t.workerId());
        }
        return on;
    }

    static void append(Path file, int from, int to) throws Exception {
        StringBuilder b = new StringBuilder();
        for (int i = from; i < to; i++) b.append("line-").append(i).append('\n');
        Files.writeString(file, b, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    static List<String> lines(Path file) throws Exception {
        return Files.exists(file) ? Files.readAllLines(file, StandardCharsets.UTF_8) : List.of();
    }

    static List<String> expected(int n) {
        List<String> l = new ArrayList<>();
        for (int i = 0; i < n; i++) l.add("line-" + i);
        return l;
    }

    /** Waits for the sink's file to hold the first `n` lines, each once and in order. */
    static void sinkHolds(Path out, int n, String what) throws Exception {
        eventually(90, () -> lines(out).size() >= n, what + ": the sink wrote " + n + " lines (it has "
                + lines(out).size() + ")");
        expect(lines(out).equals(expected(n)), what + ": the sink's " + lines(out).size()
                + " lines are the source's " + n + ", each once, in order");
    }

    /** The topic's values, read from the start with `isolation` until `n` arrived or 60 s passed. */
    static List<String> topicValues(String topic, int n, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", addr);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("isolation.level", isolation);
        // The connector creates the topic (KIP-158); a reader must not create it first.
        p.put("allow.auto.create.topics", "false");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (got.size() < n && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
            }
            // Anything past n would be a duplicate: one more short poll to see it.
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r.value());
        }
        return got;
    }

    // ---------------------------------------------------------------------------------------

    /**
     * Two workers, a file source and a file sink: the internal topics as Connect makes them,
     * every line through the broker once, one worker stopped (its tasks move), then started
     * again (it reads the connectors back from the config topic).
     */
    static void distributed(Admin admin) throws Exception {
        String group = "connect-" + RUN;
        String topic = group + "-lines";
        Path in = dir.resolve(group + ".in"), out = dir.resolve(group + ".out");
        Files.createFile(in);
        List<Worker1> workers = new ArrayList<>(List.of(new Worker1(group, "w1", Map.of()),
                new Worker1(group, "w2", Map.of())));
        eventually(60, () -> workers.get(0).connectors().isEmpty() && workers.get(1).connectors().isEmpty(),
                "both workers joined and read the config topic");

        // The internal topics, created by the workers with Connect's partition counts and
        // cleanup policy; the broker lists the workers' group with the "connect" protocol.
        Map<String, Integer> internal = Map.of(group + "-configs", 1, group + "-offsets", 25, group + "-status", 5);
        Map<String, TopicDescription> d = admin.describeTopics(internal.keySet()).allTopicNames().get(10, TimeUnit.SECONDS);
        for (Map.Entry<String, Integer> e : internal.entrySet()) {
            expect(d.get(e.getKey()).partitions().size() == e.getValue(), e.getKey() + " has " + e.getValue() + " partitions");
            int replicas = d.get(e.getKey()).partitions().get(0).replicas().size();
            expect(brokerDefaultRf || replicas == 3, e.getKey() + " has Connect's default 3 replicas (" + replicas + ")");
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, e.getKey());
            String policy = admin.describeConfigs(List.of(r)).all().get(10, TimeUnit.SECONDS).get(r)
                    .get("cleanup.policy").value();
            expect(policy.equals("compact"), e.getKey() + " is compacted (" + policy + ")");
        }
        GroupListing listed = admin.listGroups().all().get(10, TimeUnit.SECONDS).stream()
                .filter(g -> g.groupId().equals(group)).findFirst().orElse(null);
        expect(listed != null && listed.protocol().equals("connect") && listed.type().equals(Optional.of(GroupType.CLASSIC)),
                "the workers' group is listed as a classic group of protocol connect: " + listed);
        ok("two Connect workers joined group " + group + " and created its config (1 partition), offsets (25) "
                + "and status (5) topics, compacted" + (brokerDefaultRf ? "" : ", 3 replicas each"));

        createConnector(workers, "source", Map.of("connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max", "1", "file", in.toString(), "topic", topic, "topic.creation.default.partitions", "1",
                "topic.creation.default.replication.factor", topicRf()));
        append(in, 0, 2000);
        // The sink starts once the source made its topic: the sink's consumer could make it
        // first, with the broker's default partition count.
        eventually(60, () -> admin.listTopics().names().get().contains(topic), "the source connector created " + topic);
        createConnector(workers, "sink", Map.of("connector.class", "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max", "1", "file", out.toString(), "topics", topic));
        sinkHolds(out, 2000, "two workers");
        int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get(10, TimeUnit.SECONDS).get(topic)
                .partitions().size();
        expect(partitions == 1, "the source connector created " + topic + " with 1 partition (KIP-158): " + partitions);
        List<String> values = topicValues(topic, 2000, "read_uncommitted");
        expect(values.equals(expected(2000)), "the topic holds the 2,000 lines once, in order (" + values.size() + ")");
        eventually(30, () -> running(workers.get(0), "source") != null && running(workers.get(0), "sink") != null,
                "both connectors and their tasks RUNNING");
        ok("FileStreamSource created " + topic + " (1 partition) and wrote 2,000 lines to it, and FileStreamSink "
                + "wrote them back, each once, "
                + "in order; tasks on " + running(workers.get(0), "source") + " and " + running(workers.get(0), "sink"));

        // w1 stops (it leaves the group); its tasks move to w2, which goes on from the offsets
        // committed to the offsets topic and the sink group.
        workers.remove(0).stop();
        Worker1 w2 = workers.get(0);
        eventually(60, () -> List.of(w2.id).equals(running(w2, "source")) && List.of(w2.id).equals(running(w2, "sink")),
                "both tasks moved to w2");
        append(in, 2000, 3000);
        sinkHolds(out, 3000, "after w1 stopped");
        ok("w1 stopped: both tasks moved to w2, which carried on from the committed offsets (3,000 lines, each once)");

        // w1 again: it reads both connectors from the config topic and takes work back.
        Worker1 w1 = new Worker1(group, "w1", Map.of());
        workers.add(w1);
        eventually(60, () -> new TreeSet<>(w1.connectors()).equals(new TreeSet<>(List.of("sink", "source"))),
                "the restarted w1 reads both connectors from the config topic");
        append(in, 3000, 3500);
        sinkHolds(out, 3500, "after w1 started again");
        values = topicValues(topic, 3500, "read_uncommitted");
        expect(values.equals(expected(3500)), "the topic holds the 3,500 lines once, in order (" + values.size() + ")");
        ok("w1 started again and read both connectors back from the config topic; 3,500 lines, each once");
        for (Worker1 w : workers) w.stop();
    }

    /**
     * Exactly-once source support (KIP-618): the workers' leader writes the config topic with a
     * transactional producer, each source task writes in transactions under its own
     * transactional id, and a task that moves is fenced first (Admin.fenceProducers).
     */
    static void exactlyOnceSource(Admin admin) throws Exception {
        String group = "connect-eos-" + RUN;
        String topic = group + "-lines";
        Path in = dir.resolve(group + ".in");
        Files.createFile(in);
        Map<String, String> eos = Map.of("exactly.once.source.support", "enabled");
        List<Worker1> workers = new ArrayList<>(List.of(new Worker1(group, "w1", eos), new Worker1(group, "w2", eos)));
        eventually(60, () -> workers.get(0).connectors().isEmpty() && workers.get(1).connectors().isEmpty(),
                "both exactly-once workers joined");
        createConnector(workers, "source", Map.of("connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max", "1", "file", in.toString(), "topic", topic, "exactly.once.support", "required",
                "topic.creation.default.partitions", "1", "topic.creation.default.replication.factor", topicRf()));
        eventually(60, () -> running(workers.get(0), "source") != null, "the exactly-once source task RUNNING");
        append(in, 0, 2000);
        eventually(60, () -> admin.listTopics().names().get().contains(topic), "the connector created " + topic);
        List<String> values = topicValues(topic, 2000, "read_committed");
        expect(values.equals(expected(2000)), "read_committed sees the 2,000 lines once, in order (" + values.size() + ")");
        String txnId = group + "-source-0";
        Collection<TransactionListing> txns = admin.listTransactions().all().get(10, TimeUnit.SECONDS);
        expect(txns.stream().anyMatch(t -> t.transactionalId().equals(txnId)),
                "the task's transactional id " + txnId + " is listed");
        String leaderTxnId = "connect-cluster-" + group;
        expect(txns.stream().anyMatch(t -> t.transactionalId().equals(leaderTxnId)),
                "the leader's transactional id " + leaderTxnId + " is listed");
        ok("exactly-once source: 2,000 lines committed in transactions of " + txnId
                + ", config topic written by " + leaderTxnId + "; read_committed sees each once");

        // The worker that runs the task stops; the task starts on the other after its
        // transactional id is fenced, and goes on from the committed offsets.
        String from = running(workers.get(0), "source").get(0);
        Worker1 leaving = workers.stream().filter(w -> w.id.equals(from)).findFirst().orElseThrow();
        workers.remove(leaving);
        leaving.stop();
        Worker1 other = workers.get(0);
        eventually(60, () -> List.of(other.id).equals(running(other, "source")), "the task moved to " + other.id);
        append(in, 2000, 3000);
        values = topicValues(topic, 3000, "read_committed");
        expect(values.equals(expected(3000)), "read_committed sees the 3,000 lines once, in order (" + values.size() + ")");
        ok("exactly-once source: " + from + " stopped, the task moved to " + other.id + ", 3,000 lines, each once");

        // A zombie's fate: the running task's transactional id is fenced from outside
        // (InitProducerId from another client bumps its epoch), so its next transaction fails
        // and the task with it. Restarted, it goes on from the offsets committed with its last
        // transaction: nothing twice, nothing lost.
        admin.fenceProducers(List.of(txnId)).all().get(30, TimeUnit.SECONDS);
        append(in, 3000, 3500);
        eventually(60, () -> other.herder.connectorStatus("source").tasks().get(0).state().equals("FAILED"),
                "the fenced task failed");
        String trace = other.herder.connectorStatus("source").tasks().get(0).trace();
        // Kafka answers a fenced producer's next Produce with INVALID_PRODUCER_EPOCH (its
        // AddPartitionsToTxnManager turns the coordinator's PRODUCER_FENCED into it), which
        // Connect reports as a transaction that expired; a fenced EndTxn is PRODUCER_FENCED.
        expect(trace != null && (trace.contains("InvalidProducerEpochException") || trace.contains("ProducerFencedException")),
                "the task failed fenced: " + trace);
        FutureCallback<Void> restarted = new FutureCallback<>();
        other.herder.restartTask(new org.apache.kafka.connect.util.ConnectorTaskId("source", 0), restarted);
        restarted.get(30, TimeUnit.SECONDS);
        values = topicValues(topic, 3500, "read_committed");
        expect(values.equals(expected(3500)), "read_committed sees the 3,500 lines once, in order (" + values.size() + ")");
        ok("exactly-once source: Admin.fenceProducers fenced the running task, which failed ("
                + (trace.contains("ProducerFencedException") ? "ProducerFencedException" : "InvalidProducerEpochException")
                + "); restarted, it wrote the rest: 3,500 lines, each once");
        other.stop();
    }

    public static void main(String[] args) {
        try {
            addr = args[0];
            dir = Path.of(args[1]);
            if (args.length > 2) brokerDefaultRf = false;
            Properties p = new Properties();
            p.put("bootstrap.servers", addr);
            try (Admin admin = Admin.create(p)) {
                distributed(admin);
                exactlyOnceSource(admin);
            }
            System.out.println("all Connect checks passed");
        } catch (Throwable e) {
            e.printStackTrace();
            expect(false, "threw " + e);
        }
        // The workers' threads must not keep the JVM alive.
        System.exit(0);
    }
}
