import Lumen

print("lumen")
