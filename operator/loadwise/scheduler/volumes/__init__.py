"""Volumes: the storage objects as the scheduler knows them, with their assume cache
(storage_state.py), and VolumeBinding's half that writes: Reserve, PreBind, Unreserve
(binder.py). The pure half, the Filter, is framework/plugins/volume_binding/."""
