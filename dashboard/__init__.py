"""CapsNet Explorer: the Streamlit dashboard (`streamlit run dashboard/app.py`)."""
