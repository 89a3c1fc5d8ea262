package goldilocks.jvm;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.UUID;

/** The side files the late decision keeps its state and late rows in. */
final class SideFiles {
    private SideFiles() {
    }

    /**
     * Writes lines to {@code file}: to a temporary name beside it, then an atomic move, so
     * that a reader sees the whole file or none, and a retried task replaces its own file.
     */
    static void write(Path file, Iterable<String> lines) {
        try {
            Files.createDirectories(file.getParent());
            Path tmp = file.resolveSibling("." + file.getFileName() + "." + UUID.randomUUID());
            try (BufferedWriter out = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
                for (String line : lines) {
                    out.write(line);
                    out.write('\n');
                }
            }
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE,
                       StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
