package io.outboxkit.connect;

import java.util.Map;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.Headers;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Copies where a Debezium change event comes from into two string headers, before a later
 * transform (the outbox EventRouter) replaces the value:
 *
 * <ul>
 *   <li>{@code sourceName}: {@code source.name}, the connector's logical name (topic.prefix);
 *   <li>{@code sourcePosition}: {@code source.sequence}, as Debezium writes it; for Postgres the
 *       JSON array text {@code ["<last commit LSN>","<this change's LSN>"]}.
 * </ul>
 *
 * A record whose value is not a Struct with a {@code source} Struct (heartbeats, tombstones, a
 * transaction marker) passes unchanged. A field missing from {@code source} gives a null header.
 * Kafka's HeaderFrom cannot do this: it reads top-level fields only.
 */
public class SourcePositionHeaders<R extends ConnectRecord<R>> implements Transformation<R> {

    public static final String NAME_HEADER = "name.header";
    public static final String POSITION_HEADER = "position.header";

    private static final ConfigDef CONFIG =
            new ConfigDef()
                    .define(
                            NAME_HEADER,
                            ConfigDef.Type.STRING,
                            "sourceName",
                            new ConfigDef.NonEmptyString(),
                            ConfigDef.Importance.LOW,
                            "Header for source.name (the connector's logical name).")
                    .define(
                            POSITION_HEADER,
                            ConfigDef.Type.STRING,
                            "sourcePosition",
                            new ConfigDef.NonEmptyString(),
                            ConfigDef.Importance.LOW,
                            "Header for source.sequence (the change's position in the source).");

    private String nameHeader;
    private String positionHeader;

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG, props);
        nameHeader = config.getString(NAME_HEADER);
        positionHeader = config.getString(POSITION_HEADER);
    }

    @Override
    public R apply(R record) {
        if (!(record.value() instanceof Struct value)) {
            return record;
        }
        Field field = value.schema().field("source");
        if (field == null || !(value.get(field) instanceof Struct source)) {
            return record;
        }
        // A copy of the headers: the record is immutable, and a retried batch re-applies us.
        Headers headers = record.headers().duplicate();
        headers.remove(nameHeader).addString(nameHeader, text(source, "name"));
        headers.remove(positionHeader).addString(positionHeader, text(source, "sequence"));
        return record.newRecord(
                record.topic(),
                record.kafkaPartition(),
                record.keySchema(),
                record.key(),
                record.valueSchema(),
                record.value(),
                record.timestamp(),
                headers);
    }

    /** The field's value as text, or null when absent. */
    private static String text(Struct struct, String name) {
        Field field = struct.schema().field(name);
        Object value = field == null ? null : struct.get(field);
        return value == null ? null : value.toString();
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public String version() {
        // Implementation-Version of the jar's manifest (the module's version), when packaged.
        String version = SourcePositionHeaders.class.getPackage().getImplementationVersion();
        return version == null ? "unknown" : version;
    }

    @Override
    public void close() {}
}
