package goldilocks.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.api.java.UDF4;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.TaskFailureListener;

/**
 * The watermarking stage's late decision as a scalar JVM function, so that no row crosses into
 * a Python worker and Spark can still prune the columns the decision does not read.
 *
 * <p>late_flag(source, time_us, state_dir, delay_us) returns 0 for an on-time row, 1 for a row
 * older than its source's floor (the source's newest reading of earlier micro-batches: the
 * source's CTI when one is generated after every reading), 2 for a row older than the newest
 * reading of any source less the delay, 3 for a bad row (null source or time). These are the
 * micro-batch semantics of docs/spark.md, for the goldilocks policy with a CTI after every
 * reading only.
 *
 * <p>State lives in side files under state_dir, one task's worth at a time:
 * <ul>
 *   <li>On a task's first row the micro-batch id is read from the task's local property
 *       {@code streaming.sql.batchId} (set by Spark's micro-batch execution on every job of a
 *       batch), and the floors at the batch's start are loaded from {@code cum-(b-1)}; that
 *       file is built on demand from {@code cum-(b-2)} and the parts of batch b-1, so every
 *       task of batch b sees the same floors whatever order the tasks run in.</li>
 *   <li>While rows pass, a running maximum per source of the rows not late by their floor.</li>
 *   <li>At task success a completion listener writes that maximum as
 *       {@code parts/b/part-P} (write to a temporary name, then an atomic move, so a retried
 *       task replaces its own part and a failed one leaves none).</li>
 * </ul>
 *
 * <p>The function keeps state and must be registered nondeterministic, or the optimizer may
 * evaluate it more than once per row or move it past a filter.
 */
public class LateFlag implements UDF4<String, Long, String, Long, Integer> {
    private static final long serialVersionUID = 1L;

    /** The function, marked nondeterministic (it keeps state across rows of a task). */
    public static UserDefinedFunction nondeterministic() {
        return functions.udf(new LateFlag(), DataTypes.IntegerType).asNondeterministic();
    }

    /** No reading yet: below every time, so nothing is late against it. */
    private static final long NONE = Long.MIN_VALUE;

    /** Per source: {floor at the batch's start, running maximum of accepted rows}. */
    private transient HashMap<String, long[]> state;
    /** The newest reading of any source at the batch's start, less the delay. */
    private transient long high;
    private transient boolean failed;

    @Override
    public Integer call(String source, Long time, String stateDir, Long delay) {
        if (state == null) {
            load(stateDir, delay);
        }
        if (source == null || time == null) {
            return 3;
        }
        long t = time;
        long[] s = state.get(source);
        if (s == null) {
            s = new long[] {NONE, NONE};
            state.put(source, s);
        }
        if (t < s[0]) {
            return 1;
        }
        if (t > s[1]) {
            s[1] = t;
        }
        return t < high ? 2 : 0;
    }

    /** Loads the floors of this task's batch and arranges for its part to be written. */
    private void load(String stateDir, long delay) {
        TaskContext context = TaskContext.get();
        String id = context == null ? null : context.getLocalProperty("streaming.sql.batchId");
        long batch = id == null ? 0 : Long.parseLong(id);
        Path dir = Paths.get(stateDir);
        HashMap<String, Long> floors = cumulative(dir, batch - 1);
        state = new HashMap<>(floors.size() * 2 + 16);
        long max = NONE;
        for (Map.Entry<String, Long> e : floors.entrySet()) {
            long v = e.getValue();
            state.put(e.getKey(), new long[] {v, v});
            max = Math.max(max, v);
        }
        high = max == NONE ? NONE : max - delay;
        if (context == null) {
            return; // evaluated outside a task (constant folding): nothing to keep
        }
        final int partition = context.partitionId();
        final HashMap<String, long[]> mine = state;
        context.addTaskFailureListener(new TaskFailureListener() {
            @Override
            public void onTaskFailure(TaskContext c, Throwable error) {
                failed = true; // a failed task's maxima are not the batch's: write no part
            }
        });
        context.addTaskCompletionListener(new TaskCompletionListener() {
            @Override
            public void onTaskCompletion(TaskContext c) {
                if (!failed) {
                    HashMap<String, Long> out = new HashMap<>();
                    for (Map.Entry<String, long[]> e : mine.entrySet()) {
                        out.put(e.getKey(), e.getValue()[1]);
                    }
                    write(dir.resolve("parts").resolve(Long.toString(batch))
                          .resolve("part-" + partition), out);
                }
            }
        });
    }

    /** The floors after batch k: cum-k, built from cum-(k-1) and batch k's parts if absent. */
    static HashMap<String, Long> cumulative(Path dir, long k) {
        HashMap<String, Long> floors = new HashMap<>();
        if (k < 0) {
            return floors;
        }
        Path cum = dir.resolve("cum-" + k);
        if (Files.exists(cum)) {
            read(cum, floors);
            return floors;
        }
        floors = cumulative(dir, k - 1);
        Path parts = dir.resolve("parts").resolve(Long.toString(k));
        if (Files.isDirectory(parts)) {
            try (DirectoryStream<Path> files = Files.newDirectoryStream(parts, "part-*")) {
                for (Path p : files) {
                    read(p, floors);
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        write(cum, floors);
        return floors;
    }

    /** Merges a file of "source TAB time" lines into {@code into}, keeping the maximum. */
    private static void read(Path file, HashMap<String, Long> into) {
        try {
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                int tab = line.indexOf('\t');
                if (tab < 0) {
                    continue;
                }
                long v = Long.parseLong(line.substring(tab + 1));
                into.merge(line.substring(0, tab), v, Math::max);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Writes floors as "source TAB time" lines. */
    private static void write(Path file, Map<String, Long> floors) {
        ArrayList<String> lines = new ArrayList<>(floors.size());
        for (Map.Entry<String, Long> e : floors.entrySet()) {
            lines.add(e.getKey() + '\t' + e.getValue());
        }
        SideFiles.write(file, lines);
    }
}
