package goldilocks.jvm;

import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.TaskFailureListener;

/**
 * Keeps late rows whole, written by the task that decides them, so that the data stream
 * carries on-time rows only and no second query reads the input again.
 *
 * <p>late_rows(struct(*), code, dir) always returns false. It is meant for the right side of
 * {@code code = 0 OR late_rows(...)}: Spark evaluates that side only when the left is false,
 * so it is called for late rows alone and on-time rows pay nothing. Each row is kept as a JSON
 * line with its code, and the task's lines are written at task success to
 * {@code dir/<batch id>/part-P} (a temporary name, then an atomic move: a retried task
 * replaces its own part with the same rows, a failed one leaves none).
 *
 * <p>The lines wait in memory until the task ends, with no bound: a batch with many late rows
 * holds them all.
 */
public class LateRows implements UDF3<Row, Integer, String, Boolean> {
    private static final long serialVersionUID = 1L;

    /** The function, marked nondeterministic (it keeps state across rows of a task). */
    public static UserDefinedFunction nondeterministic() {
        return functions.udf(new LateRows(), DataTypes.BooleanType).asNondeterministic();
    }

    private transient ArrayList<String> rows;
    private transient boolean failed;

    @Override
    public Boolean call(Row row, Integer code, String dir) {
        if (rows == null) {
            rows = new ArrayList<>();
            TaskContext context = TaskContext.get();
            String id = context.getLocalProperty("streaming.sql.batchId");
            final Path file = Paths.get(dir).resolve(id == null ? "0" : id)
                .resolve("part-" + context.partitionId());
            final ArrayList<String> mine = rows;
            context.addTaskFailureListener(new TaskFailureListener() {
                @Override
                public void onTaskFailure(TaskContext c, Throwable error) {
                    failed = true; // the retry writes the rows: none from a failed attempt
                }
            });
            context.addTaskCompletionListener(new TaskCompletionListener() {
                @Override
                public void onTaskCompletion(TaskContext c) {
                    if (!failed) {
                        SideFiles.write(file, mine);
                    }
                }
            });
        }
        rows.add("{\"code\":" + code + ",\"row\":" + row.json() + "}");
        return false;
    }
}
