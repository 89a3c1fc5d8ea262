package goldilocks.spark;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.ref.WeakReference;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.deploy.SparkHadoopUtil;
import org.apache.spark.sql.Row;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.TaskFailureListener;

/**
 * One task's share of a watermark stage: the state at the start of its micro-batch, the
 * decisions of its rows, the summary it leaves for the next micro-batch and its late file.
 *
 * <p>The decisions are the Python parallel plan's ({@code spark_adapter/stage_core.py}) for
 * one clock, the goldilocks or max policy and a CTI generated after every insert: a row is
 * judged against the state at the start of its micro-batch, whatever order the tasks and
 * their rows run in. With {@code m(s)} the newest start its source {@code s} has had accepted
 * in earlier micro-batches, the source's CTI is {@code m(s) - sourceDelay} and the merged CTI
 * {@code max over s of m(s) - sourceDelay - delay}. An insert starting before its source's
 * CTI is late at the source (it changes nothing); one starting before the merged CTI is late
 * at the merge (the generator accepted it: it still counts in {@code m}).
 *
 * <p>A restart may change the delays (the CTI never goes back): each source's CTI is kept,
 * not recomputed from {@code m}, and so is the merged CTI in force (the floor): with the new
 * delays a source's CTI is {@code max(its CTI, m(s) - sourceDelay)} and the merged one
 * {@code max(floor, max over s of the sources' CTIs - delay)}.
 *
 * <p>State, under {@code <state_dir>/<query id>/<stage name>/jvm/}:
 * <pre>
 *   begun                               the stage has run for this query
 *   options.json                        the stage's options (the driver reads them)
 *   cum-BBBBBBBBBBBB                    the clock after micro-batch B, folded
 *   parts/BBBBBBBBBBBB/part-PPPPPP-RUN  one task's accepted maxima of micro-batch B
 *
 * each a format name, the options' fingerprint, the source delay and the delay of its
 * writer (ns), the merged CTI in force (a cum's; none in a part), then per source: its name
 * (UTF-8 bytes), m and its CTI (ns; none in a part)
 * </pre>
 * Exactly once with Spark's own guarantees: micro-batch k runs only after k-1 is committed,
 * and an uncommitted k runs again, with the same input, in a new run (a new run id). So every
 * task of k, when it starts: deletes the files of k written by another run (a failed
 * attempt's) and anything after k (abandoned); folds the newest {@code cum} before k with the
 * parts of the micro-batches after it (all committed) into {@code cum-(k-1)}, written by
 * every task alike (a temporary name, then a rename); and deletes what that covers. At task
 * success its own part is written the same way; a failed task writes none.
 */
final class StageTask {
    static final String FORMAT = "goldilocks-stage-jvm-2";
    static final long NONE = Long.MIN_VALUE;

    // reason codes: spark_adapter/stage_spec.py
    static final int ON_TIME = 0;
    static final int NULL_TIME = 1;
    static final int TIME_RANGE = 2;
    static final int NULL_SOURCE = 6;
    static final int SOURCE_CTI = 20;
    static final int MERGED_CTI = 21;

    private static final long US_LIMIT = Long.MAX_VALUE / 1000;
    private static final int RETAIN = 2;
    private static final int ATTEMPTS = 8;
    private static final Pattern CUM = Pattern.compile("cum-(\\d+)");
    private static final Pattern PART = Pattern.compile("part-(\\d+)-(.+)");
    private static final Pattern RUN = Pattern.compile("runId = ([\\w-]+)");

    private static final ConcurrentHashMap<String, StageTask> TASKS = new ConcurrentHashMap<>();

    /** The task's state for {@code conf}, loaded on its first row. */
    static StageTask of(StageConf conf, TaskContext context) {
        String key = context.taskAttemptId() + "\u0000" + conf.key();
        StageTask task = TASKS.get(key);
        if (task == null) {
            StageTask made = new StageTask(conf, context);
            task = TASKS.putIfAbsent(key, made);
            if (task != null) {
                return task; // another thread of the task made it first
            }
            task = made;
            final StageTask mine = task;
            context.addTaskFailureListener(new TaskFailureListener() {
                @Override
                public void onTaskFailure(TaskContext c, Throwable error) {
                    mine.failed = true;
                }
            });
            context.addTaskCompletionListener(new TaskCompletionListener() {
                @Override
                public void onTaskCompletion(TaskContext c) {
                    TASKS.remove(key);
                    for (Runnable r : mine.finished) {
                        r.run();
                    }
                    mine.finish();
                }
            });
        }
        return task;
    }

    private final StageConf conf;
    private final long batch;
    private final String query;
    private final String run;
    private final int partition;
    private final FileSystem fs;
    private final Path dir;
    /** Per source: {its CTI at the batch's start, the newest start accepted in this task}. */
    private final HashMap<String, long[]> sources = new HashMap<>();
    private long judged = NONE;
    private LateWriter late;
    private boolean failed;
    /** What the functions bound to this task do when it ends (forget it). */
    private final ArrayList<Runnable> finished = new ArrayList<>();

    private StageTask(StageConf conf, TaskContext context) {
        this.conf = conf;
        String id = context.getLocalProperty("streaming.sql.batchId");
        if (id == null) {
            throw new IllegalStateException(
                "goldilocks watermark_stage: the JVM plan runs in a streaming query only");
        }
        batch = Long.parseLong(id);
        String q = context.getLocalProperty("sql.streaming.queryId");
        query = q == null ? "batch" : q;
        run = runId(context);
        partition = context.partitionId();
        Configuration hadoop = hadoop();
        Path root = new Path(conf.stateDir);
        fs = fileSystem(root, hadoop);
        dir = new Path(new Path(new Path(root, query), conf.name), "jvm");
        if (conf.latePath != null) {
            late = new LateWriter(conf, hadoop, new Path(new Path(new Path(conf.latePath),
                "query=" + query), "batch=" + batch), partition, run);
        }
        load();
    }

    /**
     * The executor's Hadoop configuration, built once per {@link SparkEnv} (a new one per
     * task read Hadoop's XML resources again: 8–25 ms of every task on the benchmark's
     * machine). Shared read-only; a writer that may set keys takes a copy.
     */
    static Configuration hadoop() {
        SparkEnv env = SparkEnv.get();
        Hadoop h = shared;
        if (h == null || h.env().get() != env) {
            h = new Hadoop(new WeakReference<>(env),
                           SparkHadoopUtil.get().newConfiguration(env.conf()));
            shared = h;
        }
        return h.conf();
    }

    /** A configuration and the environment it was built for, held weakly: a stopped
     *  session's environment is not kept alive by it. */
    private record Hadoop(WeakReference<SparkEnv> env, Configuration conf) {
    }

    private static volatile Hadoop shared;

    /** The file system of {@code path}; for a local path the raw one (Hadoop's checksummed
     *  local file system writes a {@code .crc} file beside each file, which a rename made
     *  through another handle would leave behind). */
    static FileSystem fileSystem(Path path, Configuration hadoop) {
        try {
            FileSystem f = path.getFileSystem(hadoop);
            return f instanceof LocalFileSystem ? ((LocalFileSystem) f).getRawFileSystem() : f;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static String runId(TaskContext context) {
        String group = context.getLocalProperty("spark.jobGroup.id");
        if (group != null && !group.isEmpty()) {
            return group;
        }
        String description = context.getLocalProperty("spark.job.description");
        if (description != null) {
            Matcher m = RUN.matcher(description);
            if (m.find()) {
                return m.group(1);
            }
        }
        return "run";
    }

    /** Runs {@code r} when the task ends, before its state is written. */
    void onFinish(Runnable r) {
        finished.add(r);
    }

    // -- decisions --------------------------------------------------------------------------

    int decide(String source, Long timeUs) {
        if (timeUs == null) {
            return NULL_TIME;
        }
        long us = timeUs;
        if (us > US_LIMIT || us < -US_LIMIT) {
            return TIME_RANGE;
        }
        if (source == null) {
            return NULL_SOURCE;
        }
        long t = us * 1000;
        long[] s = sources.get(source);
        if (s == null) {
            sources.put(source, new long[] {NONE, t});
        } else {
            if (t < s[0]) {
                return SOURCE_CTI; // TS §2.4: starts before its source's CTI; dropped (TS §3.1)
            }
            if (t > s[1]) {
                s[1] = t;
            }
        }
        return t < judged ? MERGED_CTI : ON_TIME; // TS §2.4 at the merge; dropped (TS §3.1)
    }

    long judged() {
        return judged;
    }

    long broke(String source, Integer code) {
        if (code == null || code == ON_TIME || code == MERGED_CTI) {
            return judged;
        }
        if (code == SOURCE_CTI) {
            long[] s = sources.get(source);
            return s == null ? NONE : s[0];
        }
        return NONE;
    }

    void keepLate(Row row, Integer code, Long broke) {
        if (late == null) {
            throw new IllegalStateException("goldilocks watermark_stage: no late_path");
        }
        late.write(row, code, broke);
    }

    // -- state ------------------------------------------------------------------------------

    private static long minus(long a, long b) { // saturating at NONE, as the engine's MIN_TIME
        if (a == NONE) {
            return NONE;
        }
        long r = a - b;
        return ((a ^ b) & (a ^ r)) < 0 ? NONE : r;
    }

    /** A clock: per source {m, its CTI}, and the merged CTI in force. */
    static final class Clock {
        final TreeMap<String, long[]> sources = new TreeMap<>();
        long floor = NONE;

        /** Folds a task's accepted maxima in, under {@code conf}'s delays. */
        void fold(Map<String, long[]> part, StageConf conf) {
            for (Map.Entry<String, long[]> e : part.entrySet()) {
                long m = e.getValue()[0];
                long cti = minus(m, conf.sourceDelay);
                long[] s = sources.get(e.getKey());
                if (s == null) {
                    sources.put(e.getKey(), new long[] {m, cti});
                } else {
                    s[0] = Math.max(s[0], m);
                    s[1] = Math.max(s[1], cti); // TS §2.1: a source's CTI never goes back
                }
            }
            settle(conf);
        }

        /** The merged CTI in force: never below the one published before (TS §2.1). */
        void settle(StageConf conf) {
            for (long[] s : sources.values()) {
                floor = Math.max(floor, minus(s[1], conf.delay));
            }
        }
    }

    private void load() {
        for (int attempt = 0; ; attempt++) {
            try {
                Clock clock = loadOnce();
                clock.settle(conf); // the delays may have changed since it was written
                for (Map.Entry<String, long[]> e : clock.sources.entrySet()) {
                    sources.put(e.getKey(), new long[] {e.getValue()[1], NONE});
                }
                judged = clock.floor;
                return;
            } catch (FileNotFoundException e) {
                if (attempt >= ATTEMPTS) { // a peer compacted what the listing showed
                    throw new IllegalStateException("goldilocks watermark_stage: the state in "
                        + dir + " kept changing while it was read; is another query "
                        + "writing it?", e);
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private Clock loadOnce() throws IOException {
        Path stage = dir.getParent();
        if (fs.exists(stage)) {
            for (FileStatus f : fs.listStatus(stage)) {
                if (!f.getPath().getName().equals("jvm")) {
                    throw new IllegalStateException("goldilocks watermark_stage: the state in "
                        + stage + " was written by the stage's Python plan; this query runs "
                        + "the JVM plan. Run it as before (watermark_stage(..., jvm=False)), or "
                        + "start a new query (a new checkpoint)");
                }
            }
        }
        if (!fs.exists(dir)) {
            if (batch > 0) { // every task of every micro-batch takes up the state (Functions)
                throw new IllegalStateException("goldilocks watermark_stage: no state for this "
                    + "query in " + dir + ", but the query is at micro-batch " + batch + ": the "
                    + "stage's state_dir was moved or deleted while the checkpoint was kept. "
                    + "Restart with the state_dir of the earlier runs, or with a new checkpoint "
                    + "(which starts the stream over)");
            }
            fs.mkdirs(dir);
            write(new Path(dir, "begun"), null);
            writeText(new Path(dir, "options.json"), conf.optionsJson);
        }
        // parts before cums: a peer writes cum-j before it deletes the parts of j, so parts
        // missing from this listing are in a cum the next listing sees
        TreeMap<Long, ArrayList<Path>> parts = new TreeMap<>();
        Path partsDir = new Path(dir, "parts");
        if (fs.exists(partsDir)) {
            for (FileStatus d : fs.listStatus(partsDir)) {
                long b = Long.parseLong(d.getPath().getName());
                if (b > batch) {
                    fs.delete(d.getPath(), true);
                    continue;
                }
                ArrayList<Path> files = new ArrayList<>();
                for (FileStatus f : fs.listStatus(d.getPath())) {
                    Matcher m = PART.matcher(f.getPath().getName());
                    if (!m.matches()) {
                        continue; // a temporary file
                    }
                    if (b == batch && !m.group(2).equals(run)) { // a failed attempt's
                        fs.delete(f.getPath(), false);
                    } else if (b < batch) {
                        files.add(f.getPath());
                    }
                }
                if (b < batch) {
                    parts.put(b, files);
                }
            }
        }
        TreeMap<Long, Path> cums = new TreeMap<>();
        for (FileStatus f : fs.listStatus(dir)) {
            Matcher m = CUM.matcher(f.getPath().getName());
            if (m.matches()) {
                long b = Long.parseLong(m.group(1));
                if (b >= batch) { // abandoned: written after a micro-batch that runs again
                    fs.delete(f.getPath(), false);
                } else {
                    cums.put(b, f.getPath());
                }
            }
        }
        Long base = cums.isEmpty() ? null : cums.lastKey();
        Clock clock = base == null ? new Clock() : read(cums.get(base));
        Long folded = null;
        for (Map.Entry<Long, ArrayList<Path>> e : parts.entrySet()) {
            if (base == null || e.getKey() > base) {
                for (Path p : e.getValue()) {
                    clock.fold(read(p).sources, conf);
                }
                folded = e.getKey();
            }
        }
        if (folded != null) {
            write(new Path(dir, String.format("cum-%012d", folded)), clock);
            base = folded;
        }
        if (base != null) { // compact: what the newest cum covers
            for (Long b : parts.keySet()) {
                if (b <= base) {
                    fs.delete(new Path(partsDir, String.format("%012d", b)), true);
                }
            }
            int newer = 0;
            for (Long b : cums.descendingKeySet()) {
                if (b < base && ++newer > RETAIN) {
                    fs.delete(cums.get(b), false);
                }
            }
        }
        return clock;
    }

    /** At task end: this task's part (on success) and its late file. */
    private void finish() {
        if (failed) {
            if (late != null) {
                late.abort();
            }
            return;
        }
        boolean written = false;
        try {
            Clock mine = new Clock();
            for (Map.Entry<String, long[]> e : sources.entrySet()) {
                if (e.getValue()[1] != NONE) {
                    mine.sources.put(e.getKey(), new long[] {e.getValue()[1], NONE});
                }
            }
            if (!mine.sources.isEmpty()) {
                write(new Path(new Path(new Path(dir, "parts"), String.format("%012d", batch)),
                               String.format("part-%06d-%s", partition, run)), mine);
            }
            if (late != null) {
                late.close();
            }
            written = true;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            if (!written && late != null) {
                late.abort(); // the task fails: its late rows are written by its retry
            }
        }
    }

    private Clock read(Path file) throws IOException {
        Clock out = new Clock();
        try (FSDataInputStream raw = fs.open(file);
             DataInputStream in = new DataInputStream(raw)) {
            String format = in.readUTF();
            String fingerprint = in.readUTF();
            if (!FORMAT.equals(format)) {
                throw new IllegalStateException("goldilocks watermark_stage: " + file
                    + " is not this version's state (" + format + ", expected " + FORMAT + ")");
            }
            String changed = changes(fingerprint, conf.fingerprint);
            if (!changed.isEmpty()) {
                throw new IllegalStateException("goldilocks watermark_stage: the state in "
                    + dir + " was written by this stage with other options (" + changed
                    + "). A restart of this query must keep them; to run with these options, "
                    + "start a new query (a new checkpoint) with its own state_dir");
            }
            in.readLong(); // the writer's delays (for readers of the files alone)
            in.readLong();
            out.floor = in.readLong();
            int n = in.readInt();
            for (int i = 0; i < n; i++) {
                byte[] name = new byte[in.readInt()];
                in.readFully(name);
                out.sources.put(new String(name, StandardCharsets.UTF_8),
                                new long[] {in.readLong(), in.readLong()});
            }
        }
        return out;
    }

    /**
     * The options whose compared value differs between two fingerprints (lines of
     * {@code name TAB compared TAB as given}), as {@code "name: before → now"}, joined by
     * {@code "; "}; empty when none does.
     */
    static String changes(String before, String now) {
        Map<String, String[]> old = options(before);
        Map<String, String[]> cur = options(now);
        StringBuilder out = new StringBuilder();
        java.util.TreeSet<String> names = new java.util.TreeSet<>(old.keySet());
        names.addAll(cur.keySet());
        for (String name : names) {
            String[] a = old.getOrDefault(name, new String[] {"?", "?"});
            String[] b = cur.getOrDefault(name, new String[] {"?", "?"});
            if (!a[0].equals(b[0])) {
                if (out.length() > 0) {
                    out.append("; ");
                }
                out.append(name).append(": ").append(a[1]).append(" \u2192 ").append(b[1]);
            }
        }
        return out.toString();
    }

    private static Map<String, String[]> options(String fingerprint) {
        Map<String, String[]> out = new TreeMap<>();
        for (String line : fingerprint.split("\n")) {
            String[] f = line.split("\t", 3);
            if (f.length == 3) {
                out.put(f[0], new String[] {f[1], f[2]});
            }
        }
        return out;
    }

    /** Writes {@code clock} (or an empty marker file) under a temporary name, then renames. */
    private void write(Path file, Clock clock) throws IOException {
        Path tmp = new Path(file.getParent(), "." + file.getName() + "." + UUID.randomUUID());
        try (FSDataOutputStream raw = fs.create(tmp, true);
             DataOutputStream out = new DataOutputStream(raw)) {
            if (clock != null) {
                out.writeUTF(FORMAT);
                out.writeUTF(conf.fingerprint);
                out.writeLong(conf.sourceDelay); // for readers: the CTIs the maxima make
                out.writeLong(conf.delay);
                out.writeLong(clock.floor);
                out.writeInt(clock.sources.size());
                for (Map.Entry<String, long[]> e : clock.sources.entrySet()) {
                    byte[] name = e.getKey().getBytes(StandardCharsets.UTF_8);
                    out.writeInt(name.length);
                    out.write(name);
                    out.writeLong(e.getValue()[0]);
                    out.writeLong(e.getValue()[1]);
                }
            }
        }
        publish(fs, tmp, file);
    }

    private void writeText(Path file, String text) throws IOException {
        Path tmp = new Path(file.getParent(), "." + file.getName() + "." + UUID.randomUUID());
        try (FSDataOutputStream out = fs.create(tmp, true)) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        }
        publish(fs, tmp, file);
    }

    /**
     * Renames {@code tmp} to {@code file}. Where the file system's rename does not replace
     * (HDFS, object stores), a {@code file} already there is kept and {@code tmp} dropped:
     * every writer of one name writes the same bytes (the same fold, or the same task's rows
     * again), and deleting the file first would leave a moment without it for a reader.
     */
    static void publish(FileSystem fs, Path tmp, Path file) throws IOException {
        if (fs.rename(tmp, file)) {
            return;
        }
        if (fs.exists(file)) {
            fs.delete(tmp, false);
            return;
        }
        throw new IOException("cannot rename " + tmp + " to " + file);
    }
}
