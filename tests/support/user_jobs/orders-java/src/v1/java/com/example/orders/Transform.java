package com.example.orders;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/** Version 1: the Kafka coordinates, key and value as strings; stateless. */
final class Transform {
  private Transform() {}

  static Dataset<Row> rows(Dataset<Row> kafka) {
    return kafka.selectExpr(
        "topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value");
  }
}
