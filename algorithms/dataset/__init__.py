"""The data a run trains on, the same in every framework: the input files checked
(input_files.py), read (csv_data.py: the Kaggle CSVs; array_data.py: .npz archives and
folders of images), split into a Dataset and put in the shared batch order (data.py)."""
