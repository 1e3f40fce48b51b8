"""The "Streaming jobs" page in the Airflow UI: an Airflow 3 plugin (a FastAPI app plus a nav entry).

``plugin`` declares it to Airflow (through the provider's ``plugins`` entry), ``app`` serves it under
the API server behind Airflow's own login, ``jobs`` gathers what a page shows from the core (the same
functions ``aks lag`` and the audit call), ``html`` renders it as server-side HTML with an inline SVG
chart: no npm build, and Airflow shows it in an iframe of its own navigation.
"""
