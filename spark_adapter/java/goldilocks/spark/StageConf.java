package goldilocks.spark;

import java.io.Serializable;
import java.util.List;
import java.util.Map;

/**
 * A watermark stage's options as its JVM functions see them, fixed when the plan is built
 * (driver) and shipped with the functions to every task.
 */
public final class StageConf implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Tells two stages of one query apart (the stage's name): each keeps its own state. */
    final String name;
    /** {@code state_dir}: a path or a Hadoop file system URI. */
    final String stateDir;
    /** {@code late_path}, or null when late rows stay in the stream ({@code keep_late}). */
    final String latePath;
    /** The merged CTI's delay behind the newest source CTI, in ns (the policy's delay). */
    final long delay;
    /** The CTI generator's delay: a source's CTI trails its newest reading by this, in ns. */
    final long sourceDelay;
    /** What the state's meaning depends on: one line per option, {@code name TAB what is
     *  compared TAB what the user gave}; a restart whose compared values differ refuses the
     *  state, naming the options that changed ({@link StageTask#changes}). */
    final String fingerprint;
    /** The stage's options as JSON, written beside the state ({@code options.json}) so that
     *  the driver can refuse a restart with other options when the plan is built. */
    final String optionsJson;
    /** Reason texts by reason code (the Python plan's texts, one source of truth). */
    final Map<Integer, String> reasons;
    /** Action texts by reason code of a late or rejected row. */
    final Map<Integer, String> actions;
    /** The late rows' columns: the user's, then cti, late_action, late_reason. */
    final String[] lateNames;
    /** Their types: string, long, int, short, byte, double, float, boolean, timestamp,
     *  date, binary. */
    final String[] lateTypes;
    /** The late writer's row-group size in bytes: its memory bound per task. */
    final int rowGroupBytes;

    public StageConf(String name, String stateDir, String latePath, long delay, long sourceDelay,
                     String fingerprint, String optionsJson, Map<Integer, String> reasons,
                     Map<Integer, String> actions, List<String> lateNames, List<String> lateTypes,
                     int rowGroupBytes) {
        this.name = name;
        this.stateDir = stateDir;
        this.latePath = latePath;
        this.delay = delay;
        this.sourceDelay = sourceDelay;
        this.fingerprint = fingerprint;
        this.optionsJson = optionsJson;
        this.reasons = Map.copyOf(reasons);
        this.actions = Map.copyOf(actions);
        this.lateNames = lateNames.toArray(new String[0]);
        this.lateTypes = lateTypes.toArray(new String[0]);
        this.rowGroupBytes = rowGroupBytes;
    }

    /** The key of this stage's per-task state. */
    String key() {
        return name + '\u0000' + stateDir;
    }
}
