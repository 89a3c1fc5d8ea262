package goldilocks.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.sql.Date;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.util.Locale;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.SimpleGroupFactory;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.example.ExampleParquetWriter;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.hadoop.util.HadoopStreams;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.PositionOutputStream;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Types;
import org.apache.spark.sql.Row;

/**
 * A task's late and rejected rows, as one Parquet file with the Python plan's layout and
 * columns: {@code <late_path>/query=<query>/batch=<k>/part-<task>-<run>.parquet}, the user's
 * columns, then {@code cti}, {@code late_action} and {@code late_reason}. Rows go to the file
 * as they come (memory: one row group, {@code rowGroupBytes}); the file is written under a
 * temporary name and renamed at task success, deleted on failure. When the task starts, files
 * of its micro-batch from another run (a failed attempt's) are deleted.
 */
final class LateWriter {
    private static final Pattern LATE = Pattern.compile("part-(\\d+)-(.+)\\.parquet");

    private final StageConf conf;
    private final Configuration hadoop;
    private final FileSystem fs;
    private final Path file;
    private final Path tmp;
    private final Kind[] kinds;
    private MessageType schema;
    private SimpleGroupFactory groups;
    private ParquetWriter<Group> writer;

    LateWriter(StageConf conf, Configuration hadoop, Path dir, int partition, String run) {
        this.conf = conf;
        this.hadoop = hadoop;
        kinds = new Kind[conf.lateTypes.length];
        for (int i = 0; i < kinds.length; i++) {
            kinds[i] = Kind.of(conf.lateTypes[i]);
        }
        fs = StageTask.fileSystem(dir, hadoop);
        try {
            if (fs.exists(dir)) {
                for (FileStatus s : fs.listStatus(dir)) {
                    Matcher m = LATE.matcher(s.getPath().getName());
                    if (m.matches() && !m.group(2).equals(run)) {
                        fs.delete(s.getPath(), false);
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        String name = String.format("part-%06d-%s.parquet", partition, run);
        file = new Path(dir, name);
        tmp = new Path(dir, "." + name + "." + UUID.randomUUID() + ".tmp");
    }

    /**
     * A late column's type (by its name in {@link StageConf#lateTypes}): how Parquet declares
     * it and how a value, as Spark gives it to a Java function, is appended.
     */
    private enum Kind {
        STRING(PrimitiveTypeName.BINARY, LogicalTypeAnnotation.stringType()) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, (String) v);
            }
        },
        BINARY(PrimitiveTypeName.BINARY, null) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, Binary.fromConstantByteArray((byte[]) v));
            }
        },
        LONG(PrimitiveTypeName.INT64, null) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, ((Number) v).longValue());
            }
        },
        INT(PrimitiveTypeName.INT32, null),
        SHORT(PrimitiveTypeName.INT32, LogicalTypeAnnotation.intType(16, true)),
        BYTE(PrimitiveTypeName.INT32, LogicalTypeAnnotation.intType(8, true)),
        DOUBLE(PrimitiveTypeName.DOUBLE, null) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, ((Number) v).doubleValue());
            }
        },
        FLOAT(PrimitiveTypeName.FLOAT, null) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, ((Number) v).floatValue());
            }
        },
        BOOLEAN(PrimitiveTypeName.BOOLEAN, null) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, (Boolean) v);
            }
        },
        TIMESTAMP(PrimitiveTypeName.INT64, LogicalTypeAnnotation.timestampType(
                      true, LogicalTypeAnnotation.TimeUnit.MICROS)) {
            @Override
            void put(Group g, String name, Object v) {
                Instant t = v instanceof Instant ? (Instant) v : ((Timestamp) v).toInstant();
                g.append(name, Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000L),
                                             t.getNano() / 1000));
            }
        },
        DATE(PrimitiveTypeName.INT32, LogicalTypeAnnotation.dateType()) {
            @Override
            void put(Group g, String name, Object v) {
                g.append(name, (int) (v instanceof LocalDate ? ((LocalDate) v).toEpochDay()
                                      : ((Date) v).toLocalDate().toEpochDay()));
            }
        };

        private final PrimitiveTypeName primitive;
        private final LogicalTypeAnnotation logical;

        Kind(PrimitiveTypeName primitive, LogicalTypeAnnotation logical) {
            this.primitive = primitive;
            this.logical = logical;
        }

        /** Integers narrower than a long: Parquet's INT32. */
        void put(Group g, String name, Object v) {
            g.append(name, ((Number) v).intValue());
        }

        void declare(Types.MessageTypeBuilder b, String name) {
            if (logical == null) {
                b.optional(primitive).named(name);
            } else {
                b.optional(primitive).as(logical).named(name);
            }
        }

        static Kind of(String type) {
            try {
                return valueOf(type.toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("goldilocks watermark_stage: no late "
                    + "column of type " + type, e);
            }
        }
    }

    private MessageType schema() {
        Types.MessageTypeBuilder b = Types.buildMessage();
        for (int i = 0; i < conf.lateNames.length; i++) {
            kinds[i].declare(b, conf.lateNames[i]);
        }
        return b.named("late");
    }

    /** The temporary file, written through {@code fs} itself (a raw local file system
     *  writes no checksum file beside it, which the rename would leave behind). */
    private OutputFile output() {
        return new OutputFile() {
            @Override
            public PositionOutputStream create(long blockSizeHint) throws IOException {
                return HadoopStreams.wrap(fs.create(tmp, false));
            }

            @Override
            public PositionOutputStream createOrOverwrite(long blockSizeHint) throws IOException {
                return HadoopStreams.wrap(fs.create(tmp, true));
            }

            @Override
            public boolean supportsBlockSize() {
                return false;
            }

            @Override
            public long defaultBlockSize() {
                return 0;
            }

            @Override
            public String getPath() {
                return tmp.toString();
            }
        };
    }

    void write(Row row, Integer code, Long broke) {
        try {
            if (writer == null) {
                schema = schema();
                groups = new SimpleGroupFactory(schema);
                // a copy: the shared configuration is read-only, and Parquet may set keys
                writer = ExampleParquetWriter.builder(output()).withConf(new Configuration(hadoop))
                    .withType(schema)
                    .withWriteMode(ParquetFileWriter.Mode.OVERWRITE)
                    .withCompressionCodec(CompressionCodecName.SNAPPY)
                    .withRowGroupSize((long) conf.rowGroupBytes)
                    .build();
            }
            Group g = groups.newGroup();
            int users = conf.lateNames.length - 3;
            for (int i = 0; i < users; i++) {
                if (!row.isNullAt(i)) {
                    kinds[i].put(g, conf.lateNames[i], row.get(i));
                }
            }
            if (broke != null) {
                g.append(conf.lateNames[users], Math.floorDiv(broke.longValue(), 1000L));
            }
            String action = conf.actions.get(code);
            if (action != null) {
                g.append(conf.lateNames[users + 1], action);
            }
            String reason = conf.reasons.get(code);
            g.append(conf.lateNames[users + 2], reason != null ? reason : "reason " + code);
            writer.write(g);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    void close() throws IOException {
        if (writer == null) {
            return;
        }
        writer.close();
        writer = null;
        StageTask.publish(fs, tmp, file);
    }

    void abort() {
        if (writer == null) {
            return;
        }
        try {
            writer.close();
        } catch (IOException ignored) {
            // the file is deleted below either way
        } finally {
            writer = null;
            try {
                fs.delete(tmp, false);
            } catch (IOException ignored) {
                // a temporary name nobody reads
            }
        }
    }
}
