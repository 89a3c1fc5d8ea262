package goldilocks.spark;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The watermark stage's JVM functions. All but {@code judged} are nondeterministic (the
 * task's state changes as rows pass), so that Spark evaluates them exactly once per row,
 * where the plan puts them, and moves no filter below them. All of a task's functions share
 * one {@link StageTask}.
 *
 * <ul>
 *   <li>{@code decide(source, time_us)}: the row's reason code, 0 when on time;</li>
 *   <li>{@code judged(code)}: the CTI, in ns, rows of this micro-batch are judged against
 *       (null before the first). The same for every row of a task, so it is declared
 *       deterministic: Spark may drop it when nothing downstream reads it. Its argument
 *       (the row's code) only ties it to a row, so that it is never folded on the driver;</li>
 *   <li>{@code broke(source, code)}: the CTI, in ns, a late row broke (null for a rejected
 *       row): its source's for a row late at the source, the merged one else;</li>
 *   <li>{@code keepLate(row, code, broke)}: writes a late or rejected row to the task's late
 *       file; always false, meant for the right of {@code code = 0 OR ...}, which Spark
 *       evaluates for late rows only.</li>
 * </ul>
 */
public final class Functions {
    private Functions() {
    }

    /** An instant in ns for Spark: null for none ({@link StageTask#NONE}). */
    private static Long instant(long ns) {
        return ns == StageTask.NONE ? null : ns;
    }

    private abstract static class Bound implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final StageConf conf;
        /** This task's state; cleared when the task ends, so a function object that Spark
         *  kept for another task looks its state up again. */
        private transient volatile StageTask task;

        Bound(StageConf conf) {
            this.conf = conf;
        }

        /**
         * Spark deserializes the functions in every task of the stage that holds them, rows
         * or none; a streaming task takes up its state here, so that a micro-batch whose task
         * gets no row still starts the query's state (and a missing state is refused in
         * every task, as the Python plans refuse it).
         */
        private void readObject(java.io.ObjectInputStream in)
                throws java.io.IOException, ClassNotFoundException {
            in.defaultReadObject();
            TaskContext context = TaskContext.get();
            if (context != null && context.getLocalProperty("streaming.sql.batchId") != null) {
                task();
            }
        }

        final StageTask task() {
            StageTask t = task;
            if (t != null) {
                return t; // no thread-local lookup per row
            }
            TaskContext context = TaskContext.get();
            if (context == null) {
                throw new IllegalStateException(
                    "goldilocks watermark_stage: a stage function ran outside a Spark task");
            }
            t = StageTask.of(conf, context);
            t.onFinish(() -> task = null);
            task = t;
            return t;
        }
    }

    static final class Decide extends Bound implements UDF2<String, Long, Integer> {
        private static final long serialVersionUID = 1L;

        Decide(StageConf conf) {
            super(conf);
        }

        @Override
        public Integer call(String source, Long timeUs) {
            return task().decide(source, timeUs);
        }
    }

    static final class Judged extends Bound implements UDF1<Integer, Long> {
        private static final long serialVersionUID = 1L;

        Judged(StageConf conf) {
            super(conf);
        }

        @Override
        public Long call(Integer code) {
            return instant(task().judged());
        }
    }

    static final class Broke extends Bound implements UDF2<String, Integer, Long> {
        private static final long serialVersionUID = 1L;

        Broke(StageConf conf) {
            super(conf);
        }

        @Override
        public Long call(String source, Integer code) {
            return instant(task().broke(source, code));
        }
    }

    static final class KeepLate extends Bound implements UDF3<Row, Integer, Long, Boolean> {
        private static final long serialVersionUID = 1L;

        KeepLate(StageConf conf) {
            super(conf);
        }

        @Override
        public Boolean call(Row row, Integer code, Long broke) {
            task().keepLate(row, code, broke);
            return false;
        }
    }

    /** The version of the functions below; the Python side checks it. (The state's format
     *  is {@link StageTask#FORMAT}.) */
    static final String API = "goldilocks-stage-functions-3";

    // Each function carries a fixed name and is applied as a column, not registered in the
    // session. The code Spark generates for a plan names the functions it calls (in its error
    // path), so a plan built again (a restarted query, the same stage in another query)
    // reuses the classes compiled for it instead of compiling and warming up new ones; the
    // function object, with its StageConf, is passed to that code as a reference, not
    // written into it, so two stages with other options share the classes safely; and with
    // nothing registered, no stage can resolve another's function by name.

    /** {@code decide(source string, time_us bigint) -> int}. */
    public static UserDefinedFunction decide(StageConf conf) {
        return functions.udf(new Decide(conf), DataTypes.IntegerType).asNondeterministic()
            .withName("goldilocks_decide");
    }

    /** {@code judged(code int) -> bigint}, deterministic (above). */
    public static UserDefinedFunction judged(StageConf conf) {
        return functions.udf(new Judged(conf), DataTypes.LongType).withName("goldilocks_judged");
    }

    /** {@code broke(source string, code int) -> bigint}. */
    public static UserDefinedFunction broke(StageConf conf) {
        return functions.udf(new Broke(conf), DataTypes.LongType).asNondeterministic()
            .withName("goldilocks_broke");
    }

    /** {@code keepLate(row struct, code int, broke bigint) -> boolean}. */
    public static UserDefinedFunction keepLate(StageConf conf) {
        return functions.udf(new KeepLate(conf), DataTypes.BooleanType).asNondeterministic()
            .withName("goldilocks_keep_late");
    }

    /** {@code f(a)} as a column (Spark's {@code apply} takes Scala varargs, which the
     *  Python side cannot pass). */
    public static Column call(UserDefinedFunction f, Column a) {
        return f.apply(a);
    }

    /** {@code f(a, b)} as a column. */
    public static Column call(UserDefinedFunction f, Column a, Column b) {
        return f.apply(a, b);
    }

    /** {@code f(a, b, c)} as a column. */
    public static Column call(UserDefinedFunction f, Column a, Column b, Column c) {
        return f.apply(a, b, c);
    }

    /** The version of the functions' API ({@link #API}); the Python side checks it. */
    public static String version() {
        return API;
    }
}
