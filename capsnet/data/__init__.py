"""The data: MNIST and Fashion-MNIST through torchvision, digits placed on a larger canvas, MultiMNIST pairs, the
paper's shifts, a drawing or upload made MNIST-like, and the task type (what one example is and how a test set is
read)."""
