"""The app's screens: the main monitor screen and the preset picker."""
