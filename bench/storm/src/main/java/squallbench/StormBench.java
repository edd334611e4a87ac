package squallbench;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;

import org.apache.storm.Config;
import org.apache.storm.LocalCluster;
import org.apache.storm.generated.KillOptions;
import org.apache.storm.generated.StormTopology;
import org.apache.storm.spout.SpoutOutputCollector;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.BasicOutputCollector;
import org.apache.storm.topology.OutputFieldsDeclarer;
import org.apache.storm.topology.TopologyBuilder;
import org.apache.storm.topology.base.BaseBasicBolt;
import org.apache.storm.topology.base.BaseRichBolt;
import org.apache.storm.topology.base.BaseRichSpout;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.Tuple;
import org.apache.storm.tuple.Values;
import org.apache.storm.utils.TupleUtils;

/**
 * Apache Storm's side of Squall's peer bench: the same two shapes as bench/run.py, run in a
 * LocalCluster in this JVM, measured from inside the topology, one JSON line on stdout.
 *
 * <pre>
 *   java -cp ... squallbench.StormBench --case noop|wordcount [--seconds 15] [--warmup 5]
 *        [--pending 1000] [--workers 2] [--ackers 2] [--loadaware true|false]
 * </pre>
 *
 * <p>Cases, mirroring Squall's: {@code noop} is a spout emitting integers with a message id,
 * shuffle-grouped to one bolt that only acks. {@code wordcount} mirrors
 * examples/wordcount/topology.yaml: a spout of the same five sentences (6-8 words, drawn at
 * random), split with anchored emits (a basic bolt), counted in a fields-grouped bolt (2
 * executors, 4 tasks, emitting changed counts every second on a tick) and reported by a global
 * bolt (a tick every 2 s).
 *
 * <p>Throughput is counted at the spout's ack callback (trees completed) and in the count bolt
 * (words executed). Complete latency is timed at the spout: emit to ack callback, every tree,
 * into the same 8%-wide geometric buckets Squall's heartbeats use (squall.stats), so the
 * percentiles are computed by the same code on both sides. The workers of a LocalCluster share
 * this JVM, so the counters are plain statics.
 */
public final class StormBench {
    static final String[] SENTENCES = {
        "the cow jumped over the moon",
        "an apple a day keeps the doctor away",
        "four score and seven years ago",
        "snow white and the seven dwarfs",
        "i am at two with nature",
    };

    // -- what the topology reports ---------------------------------------------------------
    static final LongAdder ACKED = new LongAdder();
    static final LongAdder FAILED = new LongAdder();
    static final LongAdder WORDS = new LongAdder();
    static final AtomicLongArray HIST = new AtomicLongArray(400);
    /** component -> worker ports its executors ran in, to show the placement. */
    static final Map<String, Set<Integer>> PLACEMENT = new ConcurrentHashMap<>();
    static final Map<String, Object> SEEN_CONF = new ConcurrentHashMap<>();
    static final double GROWTH = Math.log(1.08);

    static int bucketOf(double ms) {
        // squall.stats.bucket_of: 0.01 ms resolution, 8% wide buckets
        long hundredths = Math.max((long) (ms * 100.0), 0L);
        int b = (int) (Math.log(hundredths + 1.0) / GROWTH);
        return Math.min(b, HIST.length() - 1);
    }

    static void placed(TopologyContext context) {
        PLACEMENT.computeIfAbsent(context.getThisComponentId(), k -> new TreeSet<>())
                .add(context.getThisWorkerPort());
    }

    static final class Msg {
        final long t0;
        final String sentence;

        Msg(long t0, String sentence) {
            this.t0 = t0;
            this.sentence = sentence;
        }
    }

    /** The settings the spout's topology conf really has, for the JSON (one spout per case). */
    static void seenConf(Map<String, Object> conf) {
        for (String key : new String[] {Config.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING,
                Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, Config.TOPOLOGY_MAX_SPOUT_PENDING,
                Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS, Config.STORM_LOCAL_MODE_ZMQ}) {
            Object v = conf.get(key);
            if (v != null) {
                SEEN_CONF.put(key, v);
            }
        }
    }

    static void completed(Msg msg) {
        completedSince(msg.t0);
    }

    /** A tree emitted at {@code t0} (System.nanoTime) completed now. */
    static void completedSince(long t0) {
        ACKED.increment();
        HIST.incrementAndGet(bucketOf((System.nanoTime() - t0) / 1e6));
    }

    // -- no-op ----------------------------------------------------------------------------
    public static final class NumberSpout extends BaseRichSpout {
        private SpoutOutputCollector collector;
        private long n;

        @Override
        public void open(Map<String, Object> conf, TopologyContext context, SpoutOutputCollector collector) {
            this.collector = collector;
            placed(context);
            seenConf(conf);
        }

        @Override
        public void nextTuple() {
            n++;
            collector.emit(new Values(n), new Msg(System.nanoTime(), null));
        }

        @Override
        public void ack(Object msgId) {
            completed((Msg) msgId);
        }

        @Override
        public void fail(Object msgId) {
            FAILED.increment();
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("n"));
        }
    }

    public static final class AckBolt extends BaseRichBolt {
        private OutputCollector collector;

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
            placed(context);
        }

        @Override
        public void execute(Tuple tuple) {
            collector.ack(tuple);
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
        }
    }

    // -- word count -----------------------------------------------------------------------
    public static final class SentenceSpout extends BaseRichSpout {
        private SpoutOutputCollector collector;
        private Random rng;
        private final ArrayDeque<String> replay = new ArrayDeque<>();

        @Override
        public void open(Map<String, Object> conf, TopologyContext context, SpoutOutputCollector collector) {
            this.collector = collector;
            this.rng = new Random(context.getThisTaskId());
            placed(context);
            seenConf(conf);
        }

        @Override
        public void nextTuple() {
            // replays first, as examples/wordcount's spout does
            String sentence = replay.poll();
            if (sentence == null) {
                sentence = SENTENCES[rng.nextInt(SENTENCES.length)];
            }
            collector.emit(new Values(sentence), new Msg(System.nanoTime(), sentence));
        }

        @Override
        public void ack(Object msgId) {
            completed((Msg) msgId);
        }

        @Override
        public void fail(Object msgId) {
            FAILED.increment();
            replay.add(((Msg) msgId).sentence);
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("sentence"));
        }
    }

    /** A basic bolt: every emit is anchored to the input, which is acked after execute. */
    public static final class SplitSentence extends BaseBasicBolt {
        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context) {
            placed(context);
        }

        @Override
        public void execute(Tuple tuple, BasicOutputCollector collector) {
            for (String word : tuple.getString(0).split(" ")) {
                collector.emit(new Values(word));
            }
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word"));
        }
    }

    public static final class WordCount extends BaseRichBolt {
        private OutputCollector collector;
        private final Map<String, Long> counts = new HashMap<>();
        private final Set<String> changed = new HashSet<>();

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
            placed(context);
        }

        @Override
        public void execute(Tuple tuple) {
            if (TupleUtils.isTick(tuple)) {
                for (String word : new TreeSet<>(changed)) {
                    collector.emit(new Values(word, counts.get(word)));
                }
                changed.clear();
                return;
            }
            String word = tuple.getString(0);
            counts.merge(word, 1L, Long::sum);
            changed.add(word);
            WORDS.increment();
            collector.ack(tuple);
        }

        @Override
        public Map<String, Object> getComponentConfiguration() {
            Map<String, Object> conf = new HashMap<>();
            conf.put(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 1);
            return conf;
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word", "count"));
        }
    }

    public static final class Reporter extends BaseRichBolt {
        private OutputCollector collector;
        private final Map<String, Long> latest = new HashMap<>();

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
            placed(context);
        }

        @Override
        public void execute(Tuple tuple) {
            if (TupleUtils.isTick(tuple)) {
                return; // Squall's reporter prints the top ten here; the bench keeps quiet
            }
            latest.put(tuple.getString(0), tuple.getLong(1));
            collector.ack(tuple);
        }

        @Override
        public Map<String, Object> getComponentConfiguration() {
            Map<String, Object> conf = new HashMap<>();
            conf.put(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 2);
            return conf;
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
        }
    }

    // -- the run --------------------------------------------------------------------------
    static final class Snapshot {
        final long t = System.nanoTime();
        final long acked = ACKED.sum();
        final long failed = FAILED.sum();
        final long words = WORDS.sum();
        final long cpuNanos = processCpuNanos();
        final long[] hist = new long[HIST.length()];

        Snapshot() {
            for (int i = 0; i < hist.length; i++) {
                hist[i] = HIST.get(i);
            }
        }
    }

    static long processCpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            return sun.getProcessCpuTime();
        }
        return -1;
    }

    /** The first of n consecutive loopback ports that are free now (Netty binds them later). */
    static int freePortRange(int n) throws IOException {
        Random r = new Random();
        for (int attempt = 0; attempt < 200; attempt++) {
            // below Linux's ephemeral range (32768+), where outgoing connections take ports
            int base = 10000 + r.nextInt(20000);
            boolean ok = true;
            for (int p = base; p < base + n && ok; p++) {
                try (ServerSocket s = new ServerSocket(p, 1, InetAddress.getLoopbackAddress())) {
                    s.setReuseAddress(true);
                } catch (IOException e) {
                    ok = false;
                }
            }
            if (ok) {
                return base;
            }
        }
        throw new IOException("no range of " + n + " free loopback ports found");
    }

    static String arg(Map<String, String> args, String key, String dflt) {
        return args.getOrDefault(key, dflt);
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        String shape = arg(args, "case", "noop");
        double seconds = Double.parseDouble(arg(args, "seconds", "15"));
        double warmup = Double.parseDouble(arg(args, "warmup", "5"));
        int pending = Integer.parseInt(arg(args, "pending", "1000"));
        int workers = Integer.parseInt(arg(args, "workers", "2"));
        int ackers = Integer.parseInt(arg(args, "ackers", String.valueOf(workers)));
        boolean loadAware = Boolean.parseBoolean(arg(args, "loadaware", "true"));
        double timeoutSecs = Double.parseDouble(arg(args, "timeout", "30"));
        String transport = arg(args, "transport", "netty");
        if (!transport.equals("netty") && !transport.equals("inproc")) {
            throw new IllegalArgumentException("--transport must be netty or inproc, not " + transport);
        }
        NETTY = transport.equals("netty");

        TopologyBuilder b = new TopologyBuilder();
        if (shape.equals("noop")) {
            b.setSpout("numbers", new NumberSpout(), 1);
            b.setBolt("sink", new AckBolt(), 1).shuffleGrouping("numbers");
        } else if (shape.equals("wordcount")) {
            b.setSpout("sentences", new SentenceSpout(), 1);
            b.setBolt("split", new SplitSentence(), 2).shuffleGrouping("sentences");
            b.setBolt("count", new WordCount(), 2).setNumTasks(4).fieldsGrouping("split", new Fields("word"));
            b.setBolt("report", new Reporter(), 1).globalGrouping("count");
        } else {
            throw new IllegalArgumentException("--case must be noop or wordcount, not " + shape);
        }

        Config conf = new Config();
        conf.setNumWorkers(workers);
        conf.setNumAckers(ackers);
        conf.setMaxSpoutPending(pending);
        conf.setMessageTimeoutSecs((int) Math.ceil(timeoutSecs));
        conf.put(Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, true);
        conf.put(Config.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING, !loadAware);

        Map<String, Object> head = new LinkedHashMap<>();
        head.put("case", shape);
        head.put("workers", workers);
        head.put("ackers", ackers);
        head.put("pending", pending);
        head.put("loadaware", loadAware);
        head.put("transport", transport);
        runAndReport("bench-" + shape, conf, b.createTopology(), workers, warmup, seconds, head);
    }

    /**
     * Runs the topology in a LocalCluster (Netty between its workers), waits for the first
     * completed tree, warms up, measures over the window and prints the one "RESULT {json}" line
     * (the keys of {@code head} first), then halts the JVM. "MARK window-start" and
     * "MARK window-end" lines on stdout tell a caller when the window starts and ends (bench/
     * kafka_peers.py reads the broker's CPU over it).
     */
    /** Netty between the LocalCluster's workers (false: the in-memory local transport). */
    static boolean NETTY = true;

    static void runAndReport(String name, Config conf, StormTopology topology, int workers, double warmup,
                             double seconds, Map<String, Object> head) {
        // Netty over loopback between the workers (the in-memory local transport crashes on an
        // unacked flood), message timeouts on (LocalCluster.Builder turns them off).
        Map<String, Object> daemon = new HashMap<>();
        // --transport inproc: Storm's in-memory local transport between the workers of the one
        // JVM (what a LocalCluster uses by default; the faster Storm, no serialisation)
        daemon.put(Config.STORM_LOCAL_MODE_ZMQ, NETTY);
        daemon.put(Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, true);
        try {
            LocalCluster cluster = new LocalCluster.Builder()
                    .withDaemonConf(daemon)
                    .withSupervisors(1)
                    .withPortsPerSupervisor(workers)
                    .withSupervisorSlotPortMin(freePortRange(workers))
                    .build();
            long t0 = System.nanoTime();
            cluster.submitTopology(name, conf, topology);
            while (ACKED.sum() == 0) {
                if (System.nanoTime() - t0 > 180e9) {
                    throw new IllegalStateException("no tree completed within 180 s of submitting");
                }
                Thread.sleep(100);
            }
            double startup = (System.nanoTime() - t0) / 1e9;
            Thread.sleep((long) (warmup * 1000));
            System.out.println("MARK window-start");
            System.out.flush();
            Snapshot a = new Snapshot();
            Thread.sleep((long) (seconds * 1000));
            Snapshot z = new Snapshot();
            System.out.println("MARK window-end");
            System.out.flush();

            double dt = (z.t - a.t) / 1e9;
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("storm_version", org.apache.storm.utils.VersionInfo.getVersion());
            out.putAll(head);
            out.put("startup_s", startup);
            out.put("window_s", dt);
            out.put("acked_per_sec", (z.acked - a.acked) / dt);
            out.put("words_per_sec", (z.words - a.words) / dt);
            out.put("failed", z.failed - a.failed);
            out.put("acked_total", z.acked);
            out.put("cpu_s", (z.cpuNanos - a.cpuNanos) / 1e9);
            StringBuilder hist = new StringBuilder("{");
            for (int i = 0; i < z.hist.length; i++) {
                long d = z.hist[i] - a.hist[i];
                if (d > 0) {
                    hist.append(hist.length() > 1 ? ", " : "").append('"').append(i).append("\": ").append(d);
                }
            }
            hist.append('}');
            StringBuilder json = new StringBuilder("{");
            for (Map.Entry<String, Object> e : out.entrySet()) {
                Object v = e.getValue();
                String val = v instanceof String ? "\"" + v + "\"" : String.valueOf(v);
                json.append('"').append(e.getKey()).append("\": ").append(val).append(", ");
            }
            json.append("\"hist\": ").append(hist).append(", \"placement\": {");
            boolean first = true;
            for (Map.Entry<String, Set<Integer>> e : new java.util.TreeMap<>(PLACEMENT).entrySet()) {
                json.append(first ? "" : ", ").append('"').append(e.getKey()).append("\": ").append(e.getValue());
                first = false;
            }
            json.append("}, \"conf\": {");
            first = true;
            for (Map.Entry<String, Object> e : new java.util.TreeMap<>(SEEN_CONF).entrySet()) {
                Object v = e.getValue();
                String val = v instanceof String ? "\"" + v + "\"" : String.valueOf(v);
                json.append(first ? "" : ", ").append('"').append(e.getKey()).append("\": ").append(val);
                first = false;
            }
            json.append("}}");
            System.out.println("RESULT " + json);
            System.out.flush();
            KillOptions kill = new KillOptions();
            kill.set_wait_secs(0);
            cluster.killTopologyWithOpts(name, kill);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
        // LocalCluster's shutdown can take long or hang on a loaded machine: the result is out,
        // so end the JVM (and every worker thread in it) here
        Runtime.getRuntime().halt(0);
    }
}
