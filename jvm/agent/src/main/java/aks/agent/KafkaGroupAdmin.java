package aks.agent;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * The mirror's two Kafka calls through Kafka's Java AdminClient (the kafka-clients Spark's Kafka
 * connector brings): describe the group (its live members), and {@code alterConsumerGroupOffsets}.
 * Never an offset fetch. Loaded by name from {@link ShadowGroupMirror} only when a mirror group is
 * configured. The client is created once and reused: it reconnects by itself after a broker
 * restart, and its network thread is a daemon.
 */
final class KafkaGroupAdmin implements ShadowGroupMirror.GroupAdmin {
  private final Admin admin;

  KafkaGroupAdmin(Map<String, String> conf, long timeoutMs) {
    Properties props = new Properties();
    props.put(AdminClientConfig.CLIENT_ID_CONFIG, "aks-agent-mirror");
    props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(timeoutMs, Integer.MAX_VALUE)));
    props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(timeoutMs, Integer.MAX_VALUE)));
    props.putAll(conf);
    this.admin = Admin.create(props);
  }

  @Override
  public List<String> members(String group, long timeoutMs) throws Exception {
    ConsumerGroupDescription d = admin
        .describeConsumerGroups(List.of(group), new DescribeConsumerGroupsOptions().timeoutMs((int) timeoutMs))
        .describedGroups().get(group).get(timeoutMs, TimeUnit.MILLISECONDS);
    List<String> out = new ArrayList<>();
    for (MemberDescription m : d.members()) {
      out.add(m.clientId() + "@" + m.host());
    }
    return out;
  }

  @Override
  public void commit(String group, Map<String, Map<Integer, Long>> offsets, long timeoutMs) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> request = new HashMap<>();
    for (Map.Entry<String, Map<Integer, Long>> t : offsets.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        request.put(new TopicPartition(t.getKey(), p.getKey()), new OffsetAndMetadata(p.getValue()));
      }
    }
    admin.alterConsumerGroupOffsets(group, request,
        new AlterConsumerGroupOffsetsOptions().timeoutMs((int) timeoutMs)).all().get(timeoutMs, TimeUnit.MILLISECONDS);
  }

  @Override
  public void close() {
    admin.close(java.time.Duration.ofSeconds(5));
  }
}
