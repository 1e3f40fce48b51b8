"""Users'-style streaming applications that know nothing of this product (issue 25).

``orders_stream.py`` / ``orders_stream_v2.py`` (PySpark, own argparse) and the Java application
``com.example.orders.OrdersStream`` under ``orders-java/`` (own ``main``, a ``.properties`` file,
no ``Main-Class``), built for both Spark lines by ``devstack/user_jobs.py``. None imports
``airflow_kafka_spark``; the product may reach them only through Spark confs.
"""
