#!/bin/bash
#SBATCH --job-name=seg-ddp
#SBATCH --nodes=2
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --mem=0
#SBATCH --time=04:00:00
#SBATCH --output=slurm-%j.out

source ~/envs/pl10/bin/activate
export NCCL_DEBUG=WARN

srun python train.py --num-nodes 2 --gpus 4
