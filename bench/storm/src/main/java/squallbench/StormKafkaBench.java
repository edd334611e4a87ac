package squallbench;

import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.storm.Config;
import org.apache.storm.kafka.spout.FirstPollOffsetStrategy;
import org.apache.storm.kafka.spout.KafkaSpout;
import org.apache.storm.kafka.spout.KafkaSpoutConfig;
import org.apache.storm.kafka.spout.KafkaSpoutConfig.ProcessingGuarantee;
import org.apache.storm.kafka.spout.KafkaSpoutMessageId;
import org.apache.storm.kafka.spout.KafkaTupleListener;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.TopologyBuilder;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.Values;

/**
 * Apache Storm's side of bench/kafka_peers.py: storm-kafka-client's {@code KafkaSpout} reading a
 * pre-filled topic from the first offset (a fresh consumer group, AT_LEAST_ONCE, acking on) in a
 * LocalCluster of this JVM, measured as {@link StormBench} measures its cases (one RESULT line).
 *
 * <pre>
 *   java -cp ... squallbench.StormKafkaBench --case noop|wordcount --bootstrap HOST:PORT --topic T
 *        --group G [--seconds 15] [--warmup 10] [--pending 1000] [--workers 2] [--ackers 2]
 *        [--spouts 1] [--commit-ms 30000]
 * </pre>
 *
 * <p>Shapes: {@code noop}, the spout shuffle-grouped to one bolt that only acks; {@code wordcount},
 * the spout into StormBench's split (2), fields-grouped count (2 executors, 4 tasks) and global
 * reporter. The record translator emits the record's value alone (field "sentence"), as the
 * Squall side's spout emits only "value"; {@code --commit-ms} sets offsetCommitPeriodMs (its
 * default 30000). Everything else is storm-kafka-client's defaults.
 *
 * <p>Complete latency: a {@link KafkaTupleListener} (storm-kafka-client's own hook) notes when each
 * message id is emitted and, when it is acked, puts emit-to-ack into StormBench's buckets; a
 * retried tuple is timed from its last emit. Records/s is trees acked per second.
 */
public final class StormKafkaBench {
    private StormKafkaBench() {
    }

    /** Times every tuple from emit to ack into StormBench's counters (one per spout task). */
    public static final class Timing implements KafkaTupleListener {
        private static final long serialVersionUID = 1L;
        private transient Map<KafkaSpoutMessageId, Long> emittedAt;

        @Override
        public void open(Map<String, Object> conf, TopologyContext context) {
            emittedAt = new HashMap<>();
            StormBench.placed(context);
            StormBench.seenConf(conf);
        }

        @Override
        public void onEmit(List<Object> tuple, KafkaSpoutMessageId msgId) {
            if (msgId != null) {
                emittedAt.put(msgId, System.nanoTime());
            }
        }

        @Override
        public void onAck(KafkaSpoutMessageId msgId) {
            Long t0 = emittedAt.remove(msgId);
            if (t0 != null) {
                StormBench.completedSince(t0);
            }
        }

        @Override
        public void onRetry(KafkaSpoutMessageId msgId) {
            StormBench.FAILED.increment();
        }

        @Override
        public void onMaxRetryReached(KafkaSpoutMessageId msgId) {
            emittedAt.remove(msgId);
        }

        @Override
        public void onPartitionsReassigned(Collection<TopicPartition> partitions) {
        }
    }

    static String need(Map<String, String> args, String key) {
        String v = args.get(key);
        if (v == null) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return v;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        String shape = StormBench.arg(args, "case", "noop");
        String bootstrap = need(args, "bootstrap");
        String topic = need(args, "topic");
        String group = need(args, "group");
        double seconds = Double.parseDouble(StormBench.arg(args, "seconds", "15"));
        double warmup = Double.parseDouble(StormBench.arg(args, "warmup", "10"));
        int pending = Integer.parseInt(StormBench.arg(args, "pending", "1000"));
        int workers = Integer.parseInt(StormBench.arg(args, "workers", "2"));
        int ackers = Integer.parseInt(StormBench.arg(args, "ackers", String.valueOf(workers)));
        int spouts = Integer.parseInt(StormBench.arg(args, "spouts", "1"));
        double timeoutSecs = Double.parseDouble(StormBench.arg(args, "timeout", "30"));
        long commitMs = Long.parseLong(StormBench.arg(args, "commit-ms", "30000"));

        KafkaSpoutConfig<String, String> kafka = KafkaSpoutConfig.builder(bootstrap, topic)
                .setProp("group.id", group)
                .setFirstPollOffsetStrategy(FirstPollOffsetStrategy.EARLIEST)
                .setProcessingGuarantee(ProcessingGuarantee.AT_LEAST_ONCE)
                .setOffsetCommitPeriodMs(commitMs)
                .setRecordTranslator((ConsumerRecord<String, String> r) -> new Values(r.value()), new Fields("sentence"))
                .setTupleListener(new Timing())
                .build();

        TopologyBuilder b = new TopologyBuilder();
        b.setSpout("kafka", new KafkaSpout<>(kafka), spouts);
        if (shape.equals("noop")) {
            b.setBolt("sink", new StormBench.AckBolt(), 1).shuffleGrouping("kafka");
        } else if (shape.equals("wordcount")) {
            b.setBolt("split", new StormBench.SplitSentence(), 2).shuffleGrouping("kafka");
            b.setBolt("count", new StormBench.WordCount(), 2).setNumTasks(4).fieldsGrouping("split", new Fields("word"));
            b.setBolt("report", new StormBench.Reporter(), 1).globalGrouping("count");
        } else {
            throw new IllegalArgumentException("--case must be noop or wordcount, not " + shape);
        }

        Config conf = new Config();
        conf.setNumWorkers(workers);
        conf.setNumAckers(ackers);
        conf.setMaxSpoutPending(pending);
        conf.setMessageTimeoutSecs((int) Math.ceil(timeoutSecs));
        conf.put(Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, true);

        Map<String, Object> head = new LinkedHashMap<>();
        head.put("case", "kafka-" + shape);
        head.put("kafka_clients_version", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        head.put("topic", topic);
        head.put("group", group);
        head.put("spouts", spouts);
        head.put("offset_commit_period_ms", commitMs);
        head.put("workers", workers);
        head.put("ackers", ackers);
        head.put("pending", pending);
        StormBench.runAndReport("bench-kafka-" + shape, conf, b.createTopology(), workers, warmup, seconds, head);
    }
}
